"""CPU per batch of tiny records: small fields gathered from the index's columns vs read.

Packs ``--samples`` interaction records with ``feedline.pack_samples`` from a dict of
Python numbers each (``user``, ``item``, ``ts`` ints: ``.cls`` labels; ``rating`` a float:
a 0-d ``.npy``), then fills batches of 1,024 random records as the loader's direct path
does: fields the index holds as columns (``PackedDataset.gather_columns``; labels with
``gather_labels`` on a feedline without columns), the others read into rows
(``read_fields_into``). Prints the thread CPU time per batch (median and range) and the
index and shard bytes a sample. ``--src`` runs another checkout's ``src`` (a before/after
pair: each packs its own data).

    .venv/bin/python bench/columns_shapes14.py [--samples 50000] [--batches 200] [--src DIR] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=50_000)
    p.add_argument("--batches", type=int, default=200)
    p.add_argument("--src", default=str(Path(__file__).resolve().parent.parent / "src"))
    p.add_argument("--dir", help="scratch folder (default: system temp)")
    args = p.parse_args(argv)
    sys.path.insert(0, args.src)
    import numpy as np

    import feedline
    from feedline.io import PackedDataset

    n = args.samples
    with tempfile.TemporaryDirectory(prefix="columns-shapes14-", dir=args.dir) as tmp:
        out = os.path.join(tmp, "ds")
        rng = np.random.default_rng(0)
        feedline.pack_samples(({"user": int(rng.integers(0, 100_000)), "item": int(rng.integers(0, 10**6)),
                                "rating": float(rng.integers(1, 11) / 2), "ts": 1_600_000_000 + i}
                               for i in range(n)), out)
        ds = PackedDataset(out)
        sizes = {ext: sum(f.stat().st_size for f in Path(out).glob(f"*.{ext}")) for ext in ("idx", "tar")}
        schema = ds.schema
        labels = [f for f, s in schema.items() if s.kind == "label"]
        cols = [f for f, s in schema.items() if getattr(s, "column", False)]
        reads = [f for f, s in schema.items() if s.kind in ("raw", "npy") and f not in cols]
        times = []
        for _ in range(args.batches):
            idx = rng.integers(0, n, 1024)
            rows = {f: np.empty((1024, *schema[f].shape), np.dtype(schema[f].dtype).newbyteorder("="))
                    for f in labels + cols + reads}
            t0 = time.thread_time()
            ds.read_fields_into(idx, {f: rows[f] for f in reads})
            if cols:
                ds.gather_columns(idx, {f: rows[f] for f in labels + cols})
            else:
                ds.gather_labels(idx, {f: rows[f] for f in labels})
            times.append(time.thread_time() - t0)
        times = times[len(times) // 20:]  # the first batches build the catalog's columns
        med = statistics.median(times)
        print(f"index {sizes['idx'] / n:.1f} bytes a sample, shards {sizes['tar'] / n:.0f}; read {reads}, "
              f"gathered {labels + cols}: CPU per 1024-batch {med * 1e3:.3f} ms [{min(times) * 1e3:.3f}-"
              f"{max(times) * 1e3:.3f}] = {1024 / med:,.0f} samples per CPU-s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
