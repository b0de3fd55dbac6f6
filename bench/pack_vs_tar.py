"""Benchmark 5: `feedline pack` vs `tar cf` of the same small files.

    .venv/bin/python bench/pack_vs_tar.py [--quick] [--json PATH] [--repeat N]

Writes N files of 1-64 KB (log-uniform; 5,000 by default, 500 with --quick),
then times, interleaved run by run, with the output removed (untimed) before
each run and the page cache warm:

* ``tar cf``            the baseline: one tar, no index, no checksums, no fsync;
* ``tar cf + sync``     the same tar flushed to disk (coreutils ``sync FILE``);
* ``pack (API, no fsync)`` ``pack(..., durable=False)`` (``--no-fsync``): the
  same durability as ``tar cf``;
* ``pack (API)``        ``feedline.format.pack`` in this process, 1 thread,
  durable (fsyncs shard, index, manifest and folder);
* ``pack (API, -j 2)``  the same with 2 reader threads;
* ``feedline pack``     the command line, interpreter start-up included.

pack also checksums every member and the whole shard (xxh3) and writes the
index and the manifest. Ratio = baseline time / pack time (goal >= 0.5x). The
headline pairs compare equal durability: ``pack (no fsync)`` vs ``tar cf`` and
durable ``pack`` vs ``tar cf + sync``; every pack variant is also compared with
plain ``tar cf``.
CPU time (user + sys, children included) is printed too: on a loaded, shared
machine it is the steadier measure of the work each side does.
"""

from __future__ import annotations

import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import read_common as rc
from feedline.format import pack

GOAL = 0.5


def _contenders(src: Path, out: Path) -> dict[str, Callable[[], Any]]:
    tar = shutil.which("tar")
    feedline = [sys.executable, "-m", "feedline", "pack", str(src), "--out", str(out / "cli"), "-q"]
    runs: dict[str, Callable[[], Any]] = {
        "pack (API, no fsync)": lambda: pack(src, out / "api-nosync", durable=False),
        "pack (API)": lambda: pack(src, out / "api"),
        "pack (API, -j 2)": lambda: pack(src, out / "api2", workers=2),
        "feedline pack (CLI)": lambda: subprocess.run(feedline, check=True, capture_output=True),
    }
    if tar is None:
        return runs
    tar_cmd = [tar, "cf", str(out / "x.tar"), "-C", str(src), "."]
    baselines: dict[str, Callable[[], Any]] = {"tar cf": lambda: subprocess.run(tar_cmd, check=True)}
    sync = shutil.which("sync")
    if sync is not None:  # durable like pack: the tar flushed to disk (coreutils `sync FILE`)
        baselines["tar cf + sync"] = lambda: (
            subprocess.run(tar_cmd, check=True),
            subprocess.run([sync, str(out / "x.tar")], check=True),
        )
    return {**baselines, **runs}


def _cpu() -> float:
    """User + system CPU seconds of this process and its waited-for children."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _time(fns: dict[str, Callable[[], Any]], out: Path, repeat: int) -> dict[str, list[tuple[float, float]]]:
    """(wall, cpu) seconds of each run; cpu is less sensitive to a shared machine's load."""
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in fns}
    for run in range(repeat + 1):  # run 0 warms up and is not counted
        for name, fn in fns.items():
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            c0, t0 = _cpu(), time.perf_counter()
            fn()
            elapsed, cpu = time.perf_counter() - t0, _cpu() - c0
            if run:
                times[name].append((elapsed, cpu))
    shutil.rmtree(out, ignore_errors=True)
    return times


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = rc.parser(__doc__.splitlines()[0])
    p.add_argument("--files", type=int, help="number of files (default 5,000; 500 with --quick)")
    args = p.parse_args(argv)
    n = args.files or (500 if args.quick else 5000)
    with rc.scratch(args, "pack-vs-tar") as tmp:
        sizes = rc.random_sizes(n, 1 << 10, 64 << 10)
        src = tmp / "files"
        rc.write_files(src, sizes)
        nbytes = int(sizes.sum())
        times = _time(_contenders(src, tmp / "out"), tmp / "out", args.repeat)
        params = {"files": n, "bytes": nbytes, "sizes": "1-64 KB log-uniform", "fs": rc.fs_type(tmp)}
    rows = []
    for name, runs in times.items():
        walls = [w for w, _ in runs]
        row = rc.row(name, statistics.median(walls), nbytes, n, walls)
        row["cpu_median_s"] = statistics.median(c for _, c in runs)
        rows.append(row)
    by_name = {r["name"]: r for r in rows}
    skipped = []
    comparisons = []
    if "tar cf" in by_name:
        ours = [r for r in rows if not r["name"].startswith("tar")]
        comparisons = [rc.compare(r, by_name["tar cf"], GOAL) for r in ours]
        if "tar cf + sync" in by_name:  # durable vs durable
            comparisons += [rc.compare(r, by_name["tar cf + sync"], GOAL) for r in ours
                            if "no fsync" not in r["name"]]
    else:
        skipped.append({"name": "tar cf", "reason": "no tar command on PATH"})
    doc = rc.report("pack_vs_tar", args, params, rows, comparisons, skipped)
    for r in rows:
        print(f"  cpu (user+sys) {r['name']:<33} {r['cpu_median_s'] * 1e3:10.1f} ms")
    if "tar cf" in by_name:
        tar_cpu = by_name["tar cf"]["cpu_median_s"]
        for r in rows:
            if not r["name"].startswith("tar") and r["cpu_median_s"] > 0:
                print(f"  cpu ratio {r['name']} vs tar cf: {tar_cpu / r['cpu_median_s']:.2f}x")
    return doc


if __name__ == "__main__":
    main()
