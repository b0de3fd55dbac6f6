"""Real datasets' field shapes: feedline.Loader vs torch DataLoader over ``ds[i]``.

Three cases, each packed by this script (``--case`` picks one; default all):

* ``npy``: 20,000 samples of one 4 KB float32 ``.npy``, batch 256. Baseline:
  ``DataLoader(num_workers=2)`` over a map-style Dataset doing ``ds[i]`` and
  ``np.load`` (goal: Loader >= 2x).
* ``f32cls``: 50,000 samples of a 4 KB raw ``.f32`` plus a ``.cls`` label,
  batch 256. Baseline: the same DataLoader over ``ds[i]`` (frombuffer + int)
  (goal >= 2x).
* ``jpgcls``: 4,000 JPEGs of 256x256 plus a ``.cls`` label, batch 64. Baseline:
  the ceiling ``bench/loader_jpeg.py`` defines (cores x the one-core decode
  into one reused array; goal >= 0.95 of it), and the DataLoader for
  information.

Loader runs with 2 workers (threads; processes too for the small samples),
the DataLoader with 2 processes. Contenders are interleaved round by round
(``--repeat`` rounds, rotating order) after one warm-up each; medians and
the per-round ratios are printed. ``stats["recipes"]`` of the Loader is
printed too (how each field is filled).

    .venv/bin/python bench/loader_fields.py [--case npy|f32cls|jpgcls] [--quick]
        [--json PATH] [--repeat N]
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from loader_common import Report, parser, scratch
from loader_jpeg import interleaved

CASES = ("npy", "f32cls", "jpgcls")
SIZES = {"npy": (20_000, 2_000), "f32cls": (50_000, 4_000), "jpgcls": (4_000, 256)}
BATCH = {"npy": 256, "f32cls": 256, "jpgcls": 64}


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def build(folder: Path, case: str, n: int) -> Path:
    """Write ``n`` samples of ``case`` as files and pack them."""
    from feedline.format import pack

    src = folder / "src"
    src.mkdir()
    rng = np.random.default_rng(0)
    if case == "jpgcls":
        import simplejpeg

        y, x = np.mgrid[0:256, 0:256]
        base = ((np.sin(x / 17.0) + np.cos(y / 23.0)) * 60 + 128)[..., None]
    for i in range(n):
        stem = src / f"{i:08d}"
        if case == "npy":
            stem.with_suffix(".npy").write_bytes(_npy(rng.standard_normal(1024).astype(np.float32)))
        elif case == "f32cls":
            stem.with_suffix(".f32").write_bytes(rng.standard_normal(1024, np.float32).tobytes())
        else:
            img = np.clip(base + rng.normal(0, 14, (256, 256, 3)), 0, 255).astype(np.uint8)
            stem.with_suffix(".jpg").write_bytes(simplejpeg.encode_jpeg(img, quality=90))
        if case != "npy":
            stem.with_suffix(".cls").write_text(str(i % 1000))
    pack([str(src)], str(folder / "ds"), shard_size=64 << 20)
    return folder / "ds"


class Samples:
    """The baseline's map-style dataset: ``ds[i]`` decoded as a tutorial would."""

    def __init__(self, root: str, case: str) -> None:
        import feedline

        self.root, self.case = root, case
        self._n = len(feedline.open_dataset(root))
        self._ds: Any = None

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> Any:
        import torch

        import feedline

        if self._ds is None:  # opened lazily in each worker process
            self._ds = feedline.open_dataset(self.root)
        s = self._ds[i]
        if self.case == "npy":
            return torch.from_numpy(np.load(io.BytesIO(bytes(s["npy"]))))
        label = int(bytes(s["cls"]))
        if self.case == "f32cls":
            return torch.from_numpy(np.frombuffer(s["f32"], np.float32).copy()), label
        import simplejpeg

        return torch.from_numpy(simplejpeg.decode_jpeg(bytes(s["jpg"]), colorspace="RGB")), label


def _count(loader: Any, field: str) -> int:
    n = sum(int(b[field].shape[0]) for b in loader)
    loader.wait_idle()  # the next pass's batches prepared ahead are timed here too
    return n


def run_case(args: Any, case: str) -> dict[str, Any]:
    from torch.utils.data import DataLoader

    import feedline

    n = args.samples or SIZES[case][1 if args.quick else 0]
    batch = BATCH[case]
    field = {"npy": "npy", "f32cls": "f32", "jpgcls": "jpg"}[case]
    report = Report(f"loader_fields/{case}", args, samples=n, batch_size=batch, workers=2)
    with scratch(args, f"loader-fields-{case}") as folder:
        root = build(folder, case, n)
        loaders = {"feedline Loader (2 threads)": feedline.Loader(
            str(root), batch_size=batch, workers=2, prefetch=4, seed=0)}
        if case != "jpgcls":
            loaders["feedline Loader (2 processes)"] = feedline.Loader(
                str(root), batch_size=batch, workers=2, prefetch=4, seed=0,
                worker_type="process")
        dl = DataLoader(Samples(str(root), case), batch_size=batch, shuffle=True,
                        num_workers=2, persistent_workers=True, drop_last=True)
        contenders: dict[str, Callable[[], int]] = {
            name: (lambda lo=lo: _count(lo, field)) for name, lo in loaders.items()}
        base = "torch DataLoader over ds[i] (2 processes)"
        contenders[base] = lambda: sum(int((b[0] if isinstance(b, list) else b).shape[0])
                                       for b in dl)
        if case == "jpgcls":
            from loader_jpeg import _decode_into

            blobs = [bytes(s["jpg"]) for s in feedline.open_dataset(root)]
            frame = np.empty((256, 256, 3), np.uint8)
            contenders["decode into one reused array, one core"] = lambda: len(
                [_decode_into(b, frame) for b in blobs])
        interleaved(report, contenders, max(1, args.repeat))
        first = next(iter(loaders.values()))
        report.doc["recipes"] = first.stats.get("recipes")
        print(f"  recipes: {report.doc['recipes']}")
        for name in loaders:
            report.per_round(name, base, 2.0 if case != "jpgcls" else 1.0)
        if case == "jpgcls":
            rows = {r["name"]: r for r in report.doc["rows"]}
            cores = min(2, os.cpu_count() or 1)
            ceiling = cores * rows["decode into one reused array, one core"]["samples_per_s"]
            of = rows["feedline Loader (2 threads)"]["samples_per_s"] / ceiling
            report.doc["ceiling"] = {"samples_per_s": ceiling, "ours_of_ceiling": of,
                                     "goal": 0.95}
            print(f"  ceiling: {cores} workers x one-core decode into a reused array = "
                  f"{ceiling:.0f} samples/s; the Loader is {of:.0%} of it (goal >= 95%)")
        for lo in loaders.values():
            lo.close()
    return report.doc


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--case", choices=CASES, action="append", help="default: every case")
    args = p.parse_args(argv)
    json_path, args.json = args.json, None
    docs = [run_case(args, case) for case in args.case or CASES]
    if json_path:
        import json

        Path(json_path).write_text(json.dumps({"benchmark": "loader_fields", "cases": docs},
                                              indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
