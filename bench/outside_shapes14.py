"""feedline Loader vs the natural torch DataLoader on more shapes users bring (round 14).

Same method as ``bench/outside_shapes.py`` (each shape read once in order by both Loaders
and the DataLoader and compared value by value, then timed in interleaved rounds with 2
workers each; medians, samples per CPU-second of the process tree). Two tabular shapes for
the index's columns (small fixed-size fields gathered from the index, no read):

* ``recsys``: interaction records (user, item, ts ints; rating a float) written with
  ``feedline.pack_samples`` from a dict of Python numbers per record, as a user writes them
  (``user.cls``, ``item.cls``, ``ts.cls`` labels and a 0-d float64 ``rating.npy``), against
  the DataLoader over the records in memory (one structured ``.npy``, a dict of 4 Python
  numbers per ``__getitem__``), batch 1024;
* ``criteo``: click logs, per sample 13 dense float32 features (``dense.npy``, 52 bytes: a
  column), 26 hashed categorical ids (``cats.npy`` int64, 208 bytes: read into rows) and a
  0/1 ``label``, against a map-style dataset over the arrays in memory, batch 1024;

and three shapes nobody here designed for:

* ``multicam``: a driving log, per sample 6 JPEG cameras (320x180, 4:2:0), a lidar sweep
  (``lidar.npy``, 20,000-40,000 x 4 float32) and a ``calib.json`` (intrinsics and pose per
  camera), as files in one folder, ``feedline pack``; the DataLoader reads the files (same
  JPEG decoder), both give the cameras stacked, the sweeps and calibrations as lists, batch 8;
* ``medical``: 16-bit grayscale CT slices (512x512 ``.png``, values 0-4095) with an 8-bit
  organ mask (``.png``), in ``image/`` and ``mask/`` folders, ``feedline pack --key
  parallel``; the DataLoader reads them with Pillow, batch 16;
* ``series``: variable-length float32 sequences (time series of 1,000-100,000 steps, 3
  channels, ``x.npy``) with an integer class, padded per batch to the longest with the
  lengths (``feedline.padding.PadCollate`` vs the same padding written as a user's
  ``collate_fn``), batch 16.

    .venv/bin/python bench/outside_shapes14.py [--quick] [--shapes recsys,criteo] [--rounds 3] [--json PATH]
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from outside_shapes import _feedline, _png, decode, run
from outside_shapes13 import RECORD, Interactions, _photo
from peers_shapes import _npy, _png16, common_parser

SHAPES = ("recsys", "criteo", "multicam", "medical", "series")
BATCH = {"recsys": 1024, "criteo": 1024, "multicam": 8, "medical": 16, "series": 16}
FULL = {"recsys": 200_000, "criteo": 100_000, "multicam": 400, "medical": 400, "series": 800}
QUICK = {"recsys": 3000, "criteo": 3000, "multicam": 16, "medical": 20, "series": 40}
CAMS = tuple(f"cam{k}.jpg" for k in range(6))


# --- data -------------------------------------------------------------------------------------

def _calib(rng: np.random.Generator) -> dict[str, Any]:
    return {f"cam{k}": {"K": [[float(800 + rng.integers(0, 50)), 0.0, 160.0], [0.0, 800.0, 90.0], [0.0, 0.0, 1.0]],
                        "pose": [round(float(v), 6) for v in rng.standard_normal(7)]} for k in range(6)}


def _slice(rng: np.random.Generator, n: int = 512) -> tuple[np.ndarray, np.ndarray]:
    """A CT-like slice: a body ellipse of tissue values 0-4095 with organs, and its mask."""
    y, x = np.mgrid[:n, :n].astype(np.float32) / n - 0.5
    body = (x / 0.42) ** 2 + (y / 0.35) ** 2 < 1
    mask = np.zeros((n, n), np.uint8)
    for organ in range(1, 4):
        cx, cy, r = rng.uniform(-0.2, 0.2), rng.uniform(-0.15, 0.15), rng.uniform(0.04, 0.1)
        mask[((x - cx) ** 2 + (y - cy) ** 2 < r * r) & body] = organ
    ct = np.where(body, 1000 + 300 * mask.astype(np.float32) + rng.normal(0, 40, (n, n)), 0)
    return np.clip(ct, 0, 4095).astype(np.uint16), mask


def build(shape: str, n: int, folder: Path) -> Path:
    """Write the shape's source data under ``folder/files`` and its feedline dataset in
    ``folder/ds``."""
    import feedline

    src = folder / "files"
    src.mkdir(parents=True)
    rng = np.random.default_rng(0)
    if shape == "recsys":
        rec = np.empty(n, RECORD)
        rec["user"], rec["item"] = rng.integers(0, 100_000, n), rng.integers(0, 1_000_000, n)
        rec["rating"], rec["ts"] = rng.integers(1, 11, n) / 2, 1_600_000_000 + np.arange(n)
        np.save(src / "interactions.npy", rec)
        feedline.pack_samples(({"user": int(r["user"]), "item": int(r["item"]), "rating": float(r["rating"]),
                                "ts": int(r["ts"])} for r in rec), folder / "ds")
    elif shape == "criteo":
        dense = rng.lognormal(0, 2, (n, 13)).astype(np.float32)
        cats = rng.integers(0, 1 << 40, (n, 26), dtype=np.int64)
        label = (rng.random(n) < 0.25).astype(np.int64)
        np.savez(src / "clicks.npz", dense=dense, cats=cats, label=label)
        feedline.pack_samples(({"dense.npy": dense[i], "cats.npy": cats[i], "label": int(label[i])}
                               for i in range(n)), folder / "ds")
    elif shape == "multicam":
        for i in range(n):
            for cam in CAMS:
                (src / f"{i:06d}.{cam}").write_bytes(_photo(rng, 180, 320))
            pts = rng.standard_normal((int(rng.integers(20_000, 40_000)), 4)).astype(np.float32)
            (src / f"{i:06d}.lidar.npy").write_bytes(_npy(pts))
            (src / f"{i:06d}.calib.json").write_text(json.dumps(_calib(rng)))
        _feedline("pack", os.fspath(src), "--out", os.fspath(folder / "ds"))
    elif shape == "medical":
        for d in ("image", "mask"):
            (src / d).mkdir()
        for i in range(n):
            ct, mask = _slice(rng)
            (src / "image" / f"case{i // 40:03d}_{i % 40:03d}.png").write_bytes(_png16(ct))
            (src / "mask" / f"case{i // 40:03d}_{i % 40:03d}.png").write_bytes(_png(mask))
        _feedline("pack", os.fspath(src), "--out", os.fspath(folder / "ds"), "--key", "parallel")
    elif shape == "series":
        for i in range(n):
            steps = int(np.exp(rng.uniform(np.log(1000), np.log(100_000))))
            (src / f"{i:06d}.x.npy").write_bytes(_npy(rng.standard_normal((steps, 3)).astype(np.float32)))
            (src / f"{i:06d}.cls").write_text(str(int(rng.integers(0, 5))))
        _feedline("pack", os.fspath(src), "--out", os.fspath(folder / "ds"))
    else:
        raise ValueError(f"no data for shape {shape!r}")
    return folder


# --- the DataLoader side: datasets as users write them -----------------------------------------

class Clicks:
    """Criteo-style click logs in memory: a sample's dense features, ids and label."""

    def __init__(self, path: Path) -> None:
        with np.load(path) as z:
            self.dense, self.cats, self.label = z["dense"], z["cats"], z["label"]

    def __len__(self) -> int:
        return len(self.label)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"dense.npy": self.dense[i], "cats.npy": self.cats[i], "label": int(self.label[i])}


class Folder:
    """One sample per key of a flat folder (``000001.cam0.jpg``...), fields decoded as
    feedline's codecs decode them (the same JPEG decoder), or ``image/`` + ``mask/``."""

    def __init__(self, root: Path, shape: str) -> None:
        self.shape, self.root = shape, root
        if shape == "medical":
            self.keys = sorted(p.stem for p in (root / "image").iterdir())
        else:
            self.keys = sorted({p.name.split(".", 1)[0] for p in root.iterdir()})
        self.fields = {"multicam": (*CAMS, "lidar.npy", "calib.json"), "series": ("x.npy", "cls")}.get(shape, ())

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, i: int) -> dict[str, Any]:
        key = self.keys[i]
        if self.shape == "medical":
            from PIL import Image

            with Image.open(self.root / "image" / f"{key}.png") as im:
                image = np.asarray(im).astype(np.uint16)  # Pillow opens 16-bit PNGs as I;16 / I
            with Image.open(self.root / "mask" / f"{key}.png") as im:
                mask = np.asarray(im)
            return {"image.png": image, "mask.png": mask}
        out = {f: decode(f, (self.root / f"{key}.{f}").read_bytes()) for f in self.fields if f != "cls"}
        if "cls" in self.fields:
            out["cls"] = int((self.root / f"{key}.cls").read_text())
        return out


def multicam_collate(batch: list[dict[str, Any]]) -> dict[str, Any]:
    """The cameras stacked; the sweeps (varying points) and calibrations as lists."""
    import torch

    out: dict[str, Any] = {c: torch.from_numpy(np.stack([s[c] for s in batch])) for c in CAMS}
    out["lidar.npy"] = [torch.from_numpy(np.asarray(s["lidar.npy"])) for s in batch]
    out["calib.json"] = [s["calib.json"] for s in batch]
    return out


def pad_series(batch: list[dict[str, Any]]) -> dict[str, Any]:
    """A user's padding collate: sequences zero-padded to the batch's longest, their lengths."""
    import torch

    lengths = [len(s["x.npy"]) for s in batch]
    x = np.zeros((len(batch), max(lengths), batch[0]["x.npy"].shape[1]), np.float32)
    for row, s in zip(x, batch, strict=True):
        row[: len(s["x.npy"])] = s["x.npy"]
    return {"x.npy": torch.from_numpy(x), "x_lengths": torch.tensor(lengths),
            "cls": torch.tensor([s["cls"] for s in batch])}


def baseline(shape: str, folder: Path, workers: int, shuffle: bool = True) -> Callable[[], Any]:
    """The DataLoader a user writes for ``shape`` (``shuffle=False``: the content check)."""
    from torch.utils.data import DataLoader

    collate: Callable[..., Any] | None = None
    ds: Any
    if shape == "recsys":
        ds = Interactions(folder / "files" / "interactions.npy")
    elif shape == "criteo":
        ds = Clicks(folder / "files" / "clicks.npz")
    else:
        ds = Folder(folder / "files", shape)
        collate = {"multicam": multicam_collate, "series": pad_series}.get(shape)
    return lambda: DataLoader(ds, batch_size=BATCH[shape], shuffle=shuffle, num_workers=workers,
                              collate_fn=collate)


class Renamed:
    """A Loader whose batches name the recsys fields as the DataLoader's dataset does
    (``user.cls`` -> ``user``): the same tensors, for the value-by-value check."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def __iter__(self) -> Any:
        for batch in self.loader:
            yield {k.split(".", 1)[0]: v for k, v in batch.items()}

    def close(self) -> None:
        self.loader.close()


def loader(shape: str, folder: Path, workers: int, worker_type: str, shuffle: bool = True) -> Callable[[], Any]:
    """``feedline.Loader`` over the packed shape."""
    import feedline
    from feedline.padding import PadCollate

    kw: dict[str, Any] = {}
    if shape == "series":
        kw["collate"] = PadCollate({"x.npy": None})

    def make() -> Any:
        it = feedline.Loader(os.fspath(folder / "ds"), batch_size=BATCH[shape], workers=workers,
                             worker_type=worker_type, drop_last=False, shuffle=shuffle, seed=0, **kw)
        return Renamed(it) if shape == "recsys" else it
    return make


def main(argv: list[str] | None = None) -> int:
    args = common_parser(__doc__.splitlines()[0], SHAPES).parse_args(argv)
    return run(args, SHAPES, "outside_shapes14", QUICK if args.quick else FULL, build, make_loader=loader,
               make_baseline=baseline, batch=BATCH)


if __name__ == "__main__":
    raise SystemExit(main())
