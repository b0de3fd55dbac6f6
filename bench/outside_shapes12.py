"""feedline Loader vs the natural torch DataLoader on more shapes users bring (round 12).

Round 12 of ``bench/outside_shapes.py`` (same method: each shape is read once in order by
both Loaders and the DataLoader and compared value by value, then timed in interleaved
rounds with 2 workers each; medians, samples per CPU-second of the process tree), on
layouts no earlier round had:

* ``tokwin``: nanoGPT's ``train.bin`` (uint16 tokens) read as *random windows*: every start
  is a sample, ``{"x": tokens[i:i+256], "y": tokens[i+1:i+257]}`` as int64, through the
  map-style ``Windows`` of docs/pipeline.md (an ``np.memmap``), given as it is to both
  (``blocks`` of round 10 cut it into fixed blocks), batch 64;
* ``frames``: video clips as folders of numbered frames, ``<class>/<clip>/frame_000.jpg ...
  frame_007.jpg`` (T = 8, 64x64), packed with ``--key folder --labels from-folder``; the
  Loader's frame fields are stacked into ``uint8[B, T, H, W, 3]`` in the loop (as
  docs/packing.md shows), the baseline stacks each clip in ``__getitem__``, batch 16;
* ``coco``: COCO-style detection, ``images/<id>.jpg`` of several sizes + one
  ``annotations/instances.json`` (0-6 boxes per image); written with ``DatasetWriter``
  (the JPEG bytes as they are, ``boxes.npy`` float32 (k, 4), ``labels.npy`` int64 (k,)); the
  baseline is torchvision's ``CocoDetection`` recipe (the JSON indexed once) with the
  detection collate (lists), batch 16;
* ``wdsadopt``: WebDataset tars written by another tool (Python's ``tarfile``, directory
  members first, keys under ``train/``, ``jpg`` + ``cls`` + ``json`` per sample), adopted with
  ``feedline index``; the baseline indexes the tars' members once and reads each by offset,
  batch 64;
* ``imu``: time-series windows from one long ``.npy``: IMU + joints float32 (T, 12) and a
  label per step, windows of 200 steps every 20 (label: the window's last step), an
  ``np.load(mmap_mode="r")`` dataset given as it is to both, batch 64.

    .venv/bin/python bench/outside_shapes12.py [--quick] [--shapes tokwin,imu] [--rounds 3] [--json PATH]
"""

from __future__ import annotations

import io
import json
import os
import sys
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from outside_shapes import _feedline, decode, run
from peers_shapes import _jpg, common_parser

SHAPES = ("tokwin", "frames", "coco", "wdsadopt", "imu")
BATCH = {"tokwin": 64, "frames": 16, "coco": 16, "wdsadopt": 64, "imu": 64}
FULL = {"tokwin": 60_000, "frames": 400, "coco": 1000, "wdsadopt": 3000, "imu": 400_000}
QUICK = {"tokwin": 3000, "frames": 40, "coco": 48, "wdsadopt": 150, "imu": 8000}
"""Tokens (``tokwin``), time steps (``imu``) or samples."""
CTX, T, WIN, STRIDE = 256, 8, 200, 20
CLASSES = ("jump", "run", "walk")


def samples(shape: str, n: int) -> int:
    """The samples of an epoch of ``shape`` built at size ``n``."""
    return n - CTX if shape == "tokwin" else (n - WIN) // STRIDE + 1 if shape == "imu" else n


# --- map-style datasets given as they are to both ---------------------------------------------

class Windows:
    """docs/pipeline.md's nanoGPT recipe: every window start of ``train.bin`` is a sample."""

    def __init__(self, path: Path, block: int = CTX) -> None:
        self.data = np.memmap(path, dtype=np.uint16, mode="r")
        self.block = block

    def __len__(self) -> int:
        return len(self.data) - self.block

    def __getitem__(self, i: int) -> dict[str, Any]:
        import torch

        chunk = torch.from_numpy(self.data[i:i + self.block + 1].astype(np.int64))
        return {"x": chunk[:-1], "y": chunk[1:]}


class ImuWindows:
    """Windows of ``WIN`` steps every ``STRIDE`` of a long recording (``np.load`` memmap)."""

    def __init__(self, folder: Path) -> None:
        self.data = np.load(folder / "imu.npy", mmap_mode="r")
        self.labels = np.load(folder / "labels.npy", mmap_mode="r")

    def __len__(self) -> int:
        return (len(self.data) - WIN) // STRIDE + 1

    def __getitem__(self, i: int) -> dict[str, Any]:
        import torch

        s = i * STRIDE
        return {"x": torch.from_numpy(np.array(self.data[s:s + WIN])), "y": int(self.labels[s + WIN - 1])}


# --- data -------------------------------------------------------------------------------------

def build(shape: str, n: int, folder: Path) -> Path:
    """Write the shape's source files under ``folder/files``; pack or index them into
    ``folder/ds`` when feedline reads a packed dataset."""
    src = folder / "files"
    src.mkdir(parents=True)
    rng = np.random.default_rng(0)
    if shape == "tokwin":
        rng.integers(0, 50_257, n).astype(np.uint16).tofile(src / "train.bin")
    elif shape == "imu":
        t = np.arange(n, dtype=np.float32)[:, None]
        sig = np.sin(t / rng.uniform(5, 50, 12).astype(np.float32)) + 0.1 * rng.standard_normal((n, 12), np.float32)
        np.save(src / "imu.npy", sig.astype(np.float32))
        np.save(src / "labels.npy", (np.arange(n) // 997 % 5).astype(np.int64))
    elif shape == "frames":
        for i in range(n):
            clip = src / CLASSES[i % 3] / f"clip_{i:04d}"
            clip.mkdir(parents=True)
            for t in range(T):
                (clip / f"frame_{t:03d}.jpg").write_bytes(_jpg(rng, 64, 64))
        _feedline("pack", os.fspath(src), "--out", os.fspath(folder / "ds"), "--key", "folder",
                  "--labels", "from-folder")
    elif shape == "coco":
        _coco(src, n, rng, folder / "ds")
    elif shape == "wdsadopt":
        _tars(src, n, rng)
        _feedline("index", os.fspath(src), "--out", os.fspath(folder / "ds"))
    else:
        raise ValueError(f"no data for shape {shape!r}")
    return folder


def _coco(src: Path, n: int, rng: np.random.Generator, out: Path) -> None:
    """COCO's layout (images + one instances JSON), then what a user writes to pack it."""
    import feedline

    (src / "images").mkdir()
    images, anns = [], []
    for i in range(n):
        h, w = ((96, 128), (128, 96), (112, 112))[i % 3]
        name = f"{i + 1:012d}.jpg"
        (src / "images" / name).write_bytes(_jpg(rng, h, w))
        images.append({"id": i + 1, "file_name": name, "height": h, "width": w})
        for _ in range(int(rng.integers(0, 7))):
            x, y = float(rng.uniform(0, w - 8)), float(rng.uniform(0, h - 8))
            anns.append({"id": len(anns) + 1, "image_id": i + 1, "category_id": int(rng.integers(1, 81)),
                         "bbox": [round(x, 2), round(y, 2), round(float(rng.uniform(4, w - x)), 2),
                                  round(float(rng.uniform(4, h - y)), 2)], "iscrowd": 0})
    (src / "annotations").mkdir()
    (src / "annotations" / "instances.json").write_text(json.dumps({"images": images, "annotations": anns}))
    coco = Coco(src)
    with feedline.DatasetWriter(os.fspath(out), shard_size="64MiB") as w:
        for path, boxes, labels in coco.items:
            w.write({"__key__": path.stem, "jpg": path.read_bytes(), "boxes.npy": boxes, "labels.npy": labels})


def _tars(src: Path, n: int, rng: np.random.Generator) -> None:
    """WebDataset shards as another tool writes them: tarfile, directory members, a prefix."""
    per = 500
    for s in range(0, n, per):
        with tarfile.open(src / f"shard-{s // per:06d}.tar", "w") as tar:
            d = tarfile.TarInfo("train")
            d.type, d.mode, d.mtime = tarfile.DIRTYPE, 0o755, 1_700_000_000
            tar.addfile(d)
            for i in range(s, min(n, s + per)):
                for ext, data in (("jpg", _jpg(rng, 64, 64)), ("cls", str(i % 10).encode()),
                                  ("json", json.dumps({"id": i, "caption": f"image {i}"}).encode())):
                    info = tarfile.TarInfo(f"train/{i:06d}.{ext}")
                    info.size, info.mode, info.mtime, info.uname = len(data), 0o644, 1_700_000_000, "bigdata"
                    tar.addfile(info, io.BytesIO(data))


# --- the baselines' datasets ------------------------------------------------------------------

class ClipFolders:
    """``<class>/<clip>/frame_*.jpg`` read as users write it: classes sorted, each clip's
    frames decoded and stacked ``(T, H, W, 3)``."""

    def __init__(self, root: Path) -> None:
        classes = sorted(d.name for d in root.iterdir())
        self.items = sorted((clip, c) for c, name in enumerate(classes) for clip in (root / name).iterdir())
        self.items.sort(key=lambda it: f"{classes[it[1]]}/{it[0].name}")

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        import torch

        clip, label = self.items[i]
        frames = [decode("jpg", (clip / f"frame_{t:03d}.jpg").read_bytes()) for t in range(T)]
        return {"frames": torch.stack(frames), "cls": label}


class Coco:
    """torchvision's ``CocoDetection`` recipe: the instances JSON indexed once; boxes
    float32 (k, 4), category ids int64 (k,) per image, images by file name (sorted)."""

    def __init__(self, root: Path) -> None:
        doc = json.loads((root / "annotations" / "instances.json").read_text())
        per: dict[int, list[dict[str, Any]]] = {im["id"]: [] for im in doc["images"]}
        for a in doc["annotations"]:
            per[a["image_id"]].append(a)
        self.items = sorted((root / "images" / im["file_name"],
                             np.array([a["bbox"] for a in per[im["id"]]], np.float32).reshape(-1, 4),
                             np.array([a["category_id"] for a in per[im["id"]]], np.int64))
                            for im in doc["images"])

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        import torch

        path, boxes, labels = self.items[i]
        return {"jpg": decode("jpg", path.read_bytes()), "boxes.npy": torch.from_numpy(boxes),
                "labels.npy": torch.from_numpy(labels)}


class TarMembers:
    """WebDataset tars read as a map-style dataset: members indexed once (key -> field ->
    offset, size), each sample's fields read by offset; keys sorted."""

    def __init__(self, root: Path) -> None:
        groups: dict[str, dict[str, tuple[Path, int, int]]] = {}
        for tar_path in sorted(root.glob("*.tar")):
            with tarfile.open(tar_path) as tar:
                for m in tar:
                    if m.isfile():
                        key, ext = m.name.split(".", 1)
                        groups.setdefault(key, {})[ext] = (tar_path, m.offset_data, m.size)
        self.items = [groups[k] for k in sorted(groups)]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for ext, (path, offset, size) in self.items[i].items():
            with open(path, "rb") as f:
                data = os.pread(f.fileno(), size, offset)
            out[ext] = int(data) if ext == "cls" else decode(ext, data)
        return out


# --- contenders -------------------------------------------------------------------------------

def coco_collate(batch: list[dict[str, Any]]) -> dict[str, Any]:
    """The detection collate (images, boxes and labels as lists), as a dict."""
    return {k: [s[k] for s in batch] for k in ("jpg", "boxes.npy", "labels.npy")}


def json_lists(batch: list[dict[str, Any]]) -> dict[str, Any]:
    from outside_shapes import _lists as lists

    return lists(batch, ("json",))


def _mapped(shape: str, folder: Path) -> Any:
    """The map-style dataset both contenders of ``tokwin`` / ``imu`` are given."""
    return Windows(folder / "files" / "train.bin") if shape == "tokwin" else ImuWindows(folder / "files")


def baseline(shape: str, folder: Path, workers: int, shuffle: bool = True) -> Callable[[], Any]:
    from torch.utils.data import DataLoader

    collate: Callable[..., Any] | None = None
    if shape in ("tokwin", "imu"):
        ds = _mapped(shape, folder)
    elif shape == "frames":
        ds = ClipFolders(folder / "files")
    elif shape == "coco":
        ds, collate = Coco(folder / "files"), coco_collate
    else:
        ds, collate = TarMembers(folder / "files"), json_lists
    return lambda: DataLoader(ds, batch_size=BATCH[shape], shuffle=shuffle, num_workers=workers,
                              collate_fn=collate)


class Stacked:
    """A Loader whose clip frames are stacked in the loop: ``uint8[B, T, H, W, 3]`` (what
    docs/packing.md writes for ``--key folder`` clips), by numpy: ``torch.stack`` in the
    training process runs on torch's intra-op threads, which on a loaded 2-core host took
    190 ms a batch (0.2 ms on one thread), where the DataLoader stacks in its workers
    (one torch thread each)."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def __iter__(self) -> Iterator[dict[str, Any]]:
        import torch

        for b in self.loader:
            frames = np.stack([b[f"frame_{t:03d}.jpg"].numpy() for t in range(T)], 1)
            yield {"frames": torch.from_numpy(frames), "cls": b["cls"]}

    def close(self) -> None:
        self.loader.close()


def loader(shape: str, folder: Path, workers: int, worker_type: str, shuffle: bool = True) -> Callable[[], Any]:
    import feedline

    source: Any = _mapped(shape, folder) if shape in ("tokwin", "imu") else os.fspath(folder / "ds")

    def make() -> Any:
        it = feedline.Loader(source, batch_size=BATCH[shape], workers=workers, worker_type=worker_type,
                             drop_last=False, shuffle=shuffle, seed=0)
        return Stacked(it) if shape == "frames" else it
    return make


def main(argv: list[str] | None = None) -> int:
    args = common_parser(__doc__.splitlines()[0], SHAPES).parse_args(argv)
    return run(args, SHAPES, "outside_shapes12", QUICK if args.quick else FULL, build, make_loader=loader,
               make_baseline=baseline, batch=BATCH)

if __name__ == "__main__":
    raise SystemExit(main())
