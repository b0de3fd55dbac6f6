"""feedline Loader vs the DataLoader a newcomer would write, round 14 (issue 12): a Kaggle table
with 5-fold CV, and 3D volumes cropped into random patches.

* ``kaggle``: ``images/<id>.jpg`` (85 %) and ``<id>.png`` (15 %), 200x160 or 160x200, and a
  ``train.csv`` of ``image_id, fold, label_a, label_b, label_c, score``; packed once with
  ``feedline pack images/ --labels train.csv --label-column none``. Fold 0's training
  split (``ds.subset(np.flatnonzero(ds.column("fold") != 0))``), batch 32: the Loader's
  ``table.chain(vision.ImageTransform(("jpg", "png"), size=64, out="image"),
  table.Columns([...], out="y"))``; the baseline is the Kaggle notebook's Dataset (the
  CSV read once, rows with ``fold != 0``, ``Image.open(path).convert("RGB")``,
  torchvision's RandomResizedCrop(64) box with Pillow bilinear, flip, normalise, the
  targets ``torch.tensor(row[cols], dtype=float32)``).
* ``volumes``: int16 scans ``D x 256 x 256`` (D = 48, 64, 80) and uint8 masks as
  ``volumes/x.npy`` + ``masks/x.npy``, packed with ``--key parallel``; 4 random
  ``32 x 96 x 96`` patches per scan an epoch (each scan 4 times in the order), batch 4:
  the Loader's ``patches.PatchTransform`` (float32 image), and the same with ``patches=4``
  (each scan read once an epoch, its 4 patches one batch: ``.flatten(0, 1)``), and
  ``patches.Patches`` (a dataset that reads only the rows each box covers); baselines: the Dataset of the
  tutorials (``np.load`` of both files, crop) and the one of a user who knows
  ``np.load(mmap_mode="r")`` (reads only the patch's pages).

``--cold`` evicts every data file (the scans, the images, the shards) from the page cache
before each timed epoch (``posix_fadvise(DONTNEED)``: a dataset larger than the page
cache, every read from the disk) and opens the Loader's dataset with ``io="direct"``.

Each contender reads once with ``shuffle=False`` first: same fields, shapes and dtypes as
the baseline's, and for ``kaggle`` the same keys' targets. Then interleaved timed rounds,
2 workers each, medians; samples per CPU-second of the process tree (other load on the
host does not lower it).

    .venv/bin/python bench/outside_newcomer14.py [--quick] [--shapes kaggle,volumes] [--rounds 5] [--cold] [--json PATH]
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from outside_shapes import _feedline, _plain, train_view
from peers_shapes import common_parser, prepare, run_once

SHAPES = ("kaggle", "volumes")
BATCH = {"kaggle": 32, "volumes": 4}
FULL = {"kaggle": 2000, "volumes": 24}
QUICK = {"kaggle": 60, "volumes": 6}
COLS = ["label_a", "label_b", "label_c", "score"]
PATCH = (32, 96, 96)
REPEAT = 4
"""Patches of each scan an epoch."""
IO = "auto"
"""The Loader's ``io=`` (``--cold``: ``"direct"``)."""


def evict(folder: Path) -> None:
    """Drop every file under ``folder`` from the page cache (clean pages; no root needed)."""
    for path in folder.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def _kaggle(folder: Path, n: int) -> None:
    from PIL import Image

    rng = np.random.default_rng(0)
    src = folder / "images"
    src.mkdir(parents=True)
    rows = []
    for i in range(n):
        iid = f"{int(rng.integers(16**8)):08x}"
        h, w = (160, 200) if i % 7 else (200, 160)
        img = np.clip(rng.normal(128, 40, (h, w, 3)), 0, 255).astype(np.uint8)
        out = io.BytesIO()
        Image.fromarray(img).save(out, "PNG" if i % 7 == 3 else "JPEG", quality=90)
        (src / f"{iid}.{'png' if i % 7 == 3 else 'jpg'}").write_bytes(out.getvalue())
        rows.append([iid, i % 5, int(rng.random() < .3), int(rng.random() < .5), int(rng.random() < .1),
                     round(float(rng.normal()), 4)])
    with open(folder / "train.csv", "w", newline="") as f:
        csv.writer(f).writerows([["image_id", "fold", *COLS], *rows])
    _feedline("pack", os.fspath(src), "--out", os.fspath(folder / "ds"), "--labels",
              os.fspath(folder / "train.csv"), "--label-column", "none", "-q")


def _volumes(folder: Path, n: int) -> None:
    rng = np.random.default_rng(1)
    for part in ("volumes", "masks"):
        (folder / "scans" / part).mkdir(parents=True)
    for i in range(n):
        d = (48, 64, 80)[i % 3]
        np.save(folder / "scans" / "volumes" / f"sub{i:03d}.npy", rng.integers(-1000, 2000, (d, 256, 256), np.int16))
        np.save(folder / "scans" / "masks" / f"sub{i:03d}.npy", (rng.random((d, 256, 256)) < .05).astype(np.uint8))
    _feedline("pack", os.fspath(folder / "scans"), "--out", os.fspath(folder / "ds"), "--key", "parallel", "-q")


def build(shape: str, n: int, folder: Path) -> Path:
    (_kaggle if shape == "kaggle" else _volumes)(folder, n)
    return folder


class KaggleCV:
    """The Kaggle notebook's Dataset: the CSV once, one fold's training rows (sorted by id, the
    packed order), each image opened with Pillow, RandomResizedCrop(64) + flip + normalise."""

    def __init__(self, folder: Path, fold: int) -> None:
        with open(folder / "train.csv", newline="") as f:
            rows = [r for r in csv.DictReader(f) if int(r["fold"]) != fold]
        files = {p.stem: p for p in (folder / "images").iterdir()}
        self.items = sorted((r["image_id"], files[r["image_id"]], [float(r[c]) for c in COLS]) for r in rows)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        import torch
        from PIL import Image

        key, path, y = self.items[i]
        return {"image": train_view(Image.open(path), 64), "y": torch.tensor(y, dtype=torch.float32), "__key__": key}


class Volumes:
    """The tutorials' patch Dataset: both .npy of a scan (``mmap``: only the patch's pages),
    one random box, the image as float32."""

    def __init__(self, folder: Path, mmap: bool) -> None:
        names = sorted(p.name for p in (folder / "scans" / "volumes").iterdir())
        self.items = [(folder / "scans" / "volumes" / n, folder / "scans" / "masks" / n) for n in names] * REPEAT
        self.mmap = "r" if mmap else None

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        vol_path, mask_path = self.items[i]
        vol, mask = np.load(vol_path, mmap_mode=self.mmap), np.load(mask_path, mmap_mode=self.mmap)
        rng = np.random.default_rng()
        z, y, x = (int(rng.integers(0, n - p + 1)) for n, p in zip(vol.shape, PATCH, strict=True))
        box = np.s_[z:z + PATCH[0], y:y + PATCH[1], x:x + PATCH[2]]
        return {"image": vol[box].astype(np.float32), "mask": np.ascontiguousarray(mask[box])}


def baselines(shape: str, folder: Path, workers: int, shuffle: bool = True) -> dict[str, Callable[[], Any]]:
    from torch.utils.data import DataLoader

    def make(ds: Any) -> Callable[[], Any]:
        return lambda: DataLoader(ds, batch_size=BATCH[shape], shuffle=shuffle, num_workers=workers)

    if shape == "kaggle":
        return {"DataLoader": make(KaggleCV(folder, fold=0))}
    return {"DataLoader (np.load)": make(Volumes(folder, mmap=False)),
            "DataLoader (mmap)": make(Volumes(folder, mmap=True))}


def loader(shape: str, folder: Path, workers: int, worker_type: str, shuffle: bool = True) -> Callable[[], Any]:
    import feedline
    from feedline import patches, table, vision

    ds = feedline.open_dataset(os.fspath(folder / "ds"), io=IO)
    if shape == "kaggle":
        split = ds.subset(np.flatnonzero(ds.column("fold") != 0))
        tf: Any = table.chain(vision.ImageTransform(("jpg", "png"), size=64, out="image"),
                              table.Columns(COLS, out="y"))
    else:
        split = ds.subset(np.tile(np.arange(len(ds)), REPEAT))
        tf = patches.PatchTransform({"volumes.npy": "image", "masks.npy": "mask"}, size=PATCH,
                                    dtypes={"image": np.float32})
    return lambda: feedline.Loader(split, batch_size=BATCH[shape], workers=workers, worker_type=worker_type,
                                   shuffle=shuffle, drop_last=False, seed=0, transform=tf)


class Flatten:
    """A Loader of ``PatchTransform(patches=k)`` batches ``[1, k, ...]`` as ``[k, ...]``."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def __iter__(self) -> Any:
        for b in self.loader:
            yield {k: v.flatten(0, 1) for k, v in b.items() if k != "__key__"}

    def close(self) -> None:
        self.loader.close()


def patches_per_read(folder: Path, workers: int) -> Callable[[], Any]:
    import feedline
    from feedline import patches

    tf = patches.PatchTransform({"volumes.npy": "image", "masks.npy": "mask"}, size=PATCH,
                                dtypes={"image": np.float32}, patches=REPEAT)
    return lambda: Flatten(feedline.Loader(feedline.open_dataset(os.fspath(folder / "ds"), io=IO), batch_size=BATCH["volumes"] // REPEAT,
                                           workers=workers, drop_last=False, seed=0, transform=tf))


def rows_only(folder: Path, workers: int, worker_type: str = "thread", shuffle: bool = True) -> Callable[[], Any]:
    import feedline
    from feedline import patches

    ds = feedline.open_dataset(os.fspath(folder / "ds"), io=IO)
    crops = patches.Patches(ds.subset(np.tile(np.arange(len(ds)), REPEAT)),
                            {"volumes.npy": "image", "masks.npy": "mask"}, size=PATCH, dtypes={"image": np.float32})
    return lambda: feedline.Loader(crops, batch_size=BATCH["volumes"], workers=workers, worker_type=worker_type,
                                   shuffle=shuffle, drop_last=False, seed=0)


def _shapes(batch: Any) -> dict[str, Any]:
    return {k: (str(v.dtype), tuple(v.shape)) for k, v in batch.items() if hasattr(v, "shape")}


def check(shape: str, folder: Path, workers: int) -> list[str]:
    """Fields, shapes and dtypes of every batch against the first baseline's, in order; for
    ``kaggle`` also the keys and the targets."""
    want = list(next(iter(baselines(shape, folder, workers, shuffle=False).values()))())
    diffs: list[str] = []
    makers = [(t, loader(shape, folder, workers, t, shuffle=False)) for t in ("thread", "process")]
    if shape == "volumes":
        makers += [(f"Patches {t}", rows_only(folder, workers, t, shuffle=False)) for t in ("thread", "process")]
    for worker_type, make in makers:
        it = make()
        try:
            got = list(it)
        finally:
            it.close()
        if len(got) != len(want):
            diffs.append(f"{worker_type}: {len(got)} batches vs {len(want)}")
        for k, (g, w) in enumerate(zip(got, want, strict=False)):
            if _shapes(g) != _shapes(w):
                diffs.append(f"{worker_type} batch {k}: {_shapes(g)} vs {_shapes(w)}")
            if shape == "kaggle" and (list(g["__key__"]) != list(w["__key__"])
                                      or not np.array_equal(_plain(g["y"]), _plain(w["y"]))):
                diffs.append(f"{worker_type} batch {k}: keys or targets differ")
    return diffs[:5]


def measure(shape: str, folder: Path, rounds: int, workers: int, cold: bool = False) -> dict[str, Any]:
    contenders = {"Loader (threads)": loader(shape, folder, workers, "thread"),
                  "Loader (processes)": loader(shape, folder, workers, "process"),
                  **({"Loader (4 patches a read)": patches_per_read(folder, workers),
                      "Loader (Patches: rows only)": rows_only(folder, workers)} if shape == "volumes" else {}),
                  **baselines(shape, folder, workers)}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in contenders}
    for _ in range(rounds):  # interleaved: A, B, C, A, B, C...
        for name, make in contenders.items():
            if cold:
                evict(folder)
            runs[name].append(run_once(make))
    base = statistics.median(r["samples_per_s"] for r in runs[next(reversed(runs))])
    rows = []
    for name, rs in runs.items():
        rates = [r["samples_per_s"] for r in rs]
        rows.append({"name": name, "samples_per_s": statistics.median(rates), "min": min(rates), "max": max(rates),
                     "samples": rs[-1]["samples"],
                     "samples_per_cpu_s": statistics.median(r["samples_per_cpu_s"] for r in rs),
                     "ratio": statistics.median(rates) / base})
    return {"shape": shape, "batch": BATCH[shape], "baseline": next(reversed(runs)), "rows": rows,
            "load": os.getloadavg()[0]}


def main(argv: list[str] | None = None) -> int:
    global IO
    p = common_parser(__doc__.splitlines()[0], SHAPES)
    p.add_argument("--cold", action="store_true", help="evict the data before each epoch; the Loader reads io='direct'")
    args = p.parse_args(argv)
    IO = "direct" if args.cold else "auto"
    shapes, rounds, scratch = prepare(args, SHAPES, "outside-newcomer14-")
    sizes = QUICK if args.quick else FULL
    results = []
    try:
        for shape in shapes:
            folder = build(shape, sizes[shape], scratch / shape)
            wrong = check(shape, folder, args.workers)
            res = {**measure(shape, folder, rounds, args.workers, args.cold), "cold": args.cold, "differences": wrong, "correct": not wrong}
            results.append(res)
            for row in res["rows"]:
                print(f"{shape:8s} {row['name']:22s} {row['samples_per_s']:8.1f} samples/s "
                      f"[{row['min']:.1f}-{row['max']:.1f}]  {row['ratio']:5.2f}x {res['baseline']}  "
                      f"{row['samples_per_cpu_s']:8.1f} samples/CPU-s  load {res['load']:.1f}", flush=True)
            print(f"{shape:8s} same fields/shapes/dtypes{' and targets' if shape == 'kaggle' else ''}: "
                  f"{res['correct']}" + "".join(f"\n  {d}" for d in wrong), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"benchmark": "outside_newcomer14", "quick": bool(args.quick),
                                               "rounds": rounds, "workers": args.workers,
                                               "sizes": {s: sizes[s] for s in shapes}, "shapes": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
