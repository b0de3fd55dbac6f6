"""Benchmark: what does rerunning `feedline pack` cost now that reuse is decided by content?

    .venv/bin/python bench/pack_rerun.py [--quick] [--json PATH] [--repeat N] [--files N]

A rerun reuses a finished shard only after reading every source file again and
comparing its checksum with the shard's index (dates are never trusted), so a
rerun over unchanged sources costs about one read of the sources. Writes N
files of 1-64 KB (log-uniform; 5,000 by default, 500 with --quick) and times,
interleaved run by run with the page cache warm:

* ``read sources``    the baseline: every source read with ``os.read`` (the
  least a content check can do);
* ``rerun (all reused)`` ``pack`` into a folder that already holds the dataset:
  every shard checked and reused, nothing written but the manifest;
* ``first pack``      ``pack`` into an empty folder (``durable=False``, like the rerun).

Two ratios (baseline time / rerun time): against ``read sources`` (1.0x: the
rerun costs only the read; goal >= 0.5x) and against ``first pack`` (goal >=
1.0x: checking a shard must cost less than writing it again).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import read_common as rc
from feedline.format import pack

GOAL = 0.5


def _read_all(paths: list[Path]) -> int:
    total = 0
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            while chunk := os.read(fd, 1 << 20):
                total += len(chunk)
        finally:
            os.close(fd)
    return total


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = rc.parser(__doc__.splitlines()[0])
    p.add_argument("--files", type=int, help="number of files (default 5,000; 500 with --quick)")
    args = p.parse_args(argv)
    n = args.files or (500 if args.quick else 5000)
    shard_size = 8 << 20
    with rc.scratch(args, "pack-rerun") as tmp:
        sizes = rc.random_sizes(n, 1 << 10, 64 << 10)
        src = tmp / "files"
        paths = rc.write_files(src, sizes)
        nbytes = int(sizes.sum())
        kept, fresh = tmp / "kept", tmp / "fresh"
        first = pack(src, kept, shard_size=shard_size, durable=False)
        inodes = [(kept / s.name).stat().st_ino for s in first.shards]

        def first_pack() -> Any:
            shutil.rmtree(fresh, ignore_errors=True)
            return pack(src, fresh, shard_size=shard_size, durable=False)

        fns = {
            "read sources": lambda: _read_all(paths),
            "rerun (all reused)": lambda: pack(src, kept, shard_size=shard_size, durable=False),
            "first pack": first_pack,
        }
        timed = rc.timeit_many(fns, args.repeat)
        reused = [(kept / s.name).stat().st_ino for s in first.shards] == inodes  # never rewritten
        params = {"files": n, "bytes": nbytes, "shards": len(first.shards), "sizes": "1-64 KB log-uniform",
                  "fs": rc.fs_type(tmp), "reused_every_shard": reused}
    rows = [rc.row(name, median, nbytes, n, times) for name, (median, times, _) in timed.items()]
    read, rerun, first_row = rows
    comparisons = [rc.compare(rerun, read, GOAL), rc.compare(rerun, first_row, 1.0)]
    return rc.report("pack_rerun", args, params, rows, comparisons, [])


if __name__ == "__main__":
    main()
