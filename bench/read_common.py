"""Shared plumbing of the bench/read_*.py benchmarks (not a benchmark itself).

Each read benchmark builds its data in a scratch folder on a disk file system
(``--dir``, default: a temporary folder under the system temp dir), warms the
page cache, times every contender ``--repeat`` times, and prints medians with
a ratio against a baseline measured in the same run. ``--json PATH`` writes
the same table as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))


def parser(description: str) -> argparse.ArgumentParser:
    """The common options: --quick, --json, --repeat, --dir, --keep."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="small sizes (seconds, for smoke tests)")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    p.add_argument("--repeat", type=int, default=5, help="timed runs per contender (median reported)")
    p.add_argument("--dir", metavar="DIR", help="scratch folder for the data (default: system temp)")
    p.add_argument("--keep", action="store_true", help="keep the generated data")
    p.add_argument("--samples", type=int, help="override the number of samples (smoke tests use a few)")
    return p


@contextmanager
def scratch(args: argparse.Namespace, name: str) -> Iterator[Path]:
    """A fresh scratch folder, removed afterwards unless --keep."""
    path = Path(tempfile.mkdtemp(prefix=f"feedline-{name}-", dir=args.dir))
    try:
        yield path
    finally:
        if not args.keep:
            shutil.rmtree(path, ignore_errors=True)


def fs_type(path: Path) -> str:
    """The file system type of ``path`` from /proc/mounts (``"unknown"`` elsewhere)."""
    best, kind = "", "unknown"
    try:
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                mount = parts[1]
                if str(path.resolve()).startswith(mount) and len(mount) > len(best):
                    best, kind = mount, parts[2]
    except OSError:
        pass
    return kind


def random_sizes(n: int, lo: int, hi: int, seed: int = 0) -> np.ndarray:
    """``n`` log-uniform sizes in ``[lo, hi]`` bytes (small files are the common case)."""
    rng = np.random.default_rng(seed)
    return np.exp(rng.uniform(np.log(lo), np.log(hi), n)).astype(np.int64)


def write_files(folder: Path, sizes: np.ndarray, fields: tuple[str, ...] = ("bin",), seed: int = 0) -> list[Path]:
    """One file per (sample, field) named ``{i:08d}.{field}``; returns the paths in order."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    pool = rng.integers(0, 256, int(sizes.max()) + 4096, dtype=np.uint8).tobytes()
    paths = []
    for i, size in enumerate(sizes.tolist()):
        for j, field in enumerate(fields):
            path = folder / f"{i:08d}.{field}"
            start = (i * 7919 + j * 131) % 4096
            path.write_bytes(pool[start : start + size])
            paths.append(path)
    return paths


def timeit(fn: Callable[[], Any], repeat: int, warmup: int = 1) -> tuple[float, list[float], Any]:
    """Median seconds of ``repeat`` runs after ``warmup`` untimed ones; also the last result."""
    result = None
    for _ in range(warmup):
        result = fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times, result


def timeit_many(fns: dict[str, Callable[[], Any]], repeat: int, warmup: int = 1) -> dict[str, tuple[float, list[float], Any]]:
    """Like :func:`timeit` for several contenders, interleaved run by run.

    Interleaving spreads the noise of a shared machine evenly over the
    contenders instead of letting it hit whichever one ran during a burst.
    """
    results: dict[str, Any] = {}
    for _ in range(warmup):
        for name, fn in fns.items():
            results[name] = fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            results[name] = fn()
            times[name].append(time.perf_counter() - t0)
    return {name: (statistics.median(times[name]), times[name], results[name]) for name in fns}


def row(name: str, seconds: float, nbytes: int, items: int, times: list[float]) -> dict[str, Any]:
    """One contender's result."""
    return {
        "name": name,
        "median_s": seconds,
        "runs_s": times,
        "bytes": nbytes,
        "items": items,
        "MBps": nbytes / seconds / 1e6 if seconds > 0 else float("inf"),
        "items_per_s": items / seconds if seconds > 0 else float("inf"),
    }


def compare(ours: dict[str, Any], baseline: dict[str, Any], goal: float) -> dict[str, Any]:
    """``ours`` vs ``baseline``: ratio = baseline time / our time (higher is better)."""
    ratio = baseline["median_s"] / ours["median_s"] if ours["median_s"] > 0 else float("inf")
    return {"ours": ours["name"], "baseline": baseline["name"], "ratio": ratio, "goal": goal, "meets_goal": ratio >= goal}


def report(name: str, args: argparse.Namespace, params: dict[str, Any], rows: list[dict[str, Any]],
           comparisons: list[dict[str, Any]], skipped: list[dict[str, str]]) -> dict[str, Any]:
    """Print the table and write --json; returns the result document."""
    doc = {
        "benchmark": name,
        "preliminary": True,
        "quick": bool(args.quick),
        "repeat": args.repeat,
        "params": params,
        "host": {"python": platform.python_version(), "cpus": os.cpu_count(), "machine": platform.machine()},
        "rows": rows,
        "comparisons": comparisons,
        "skipped": skipped,
    }
    print(f"== {name} (medians of {args.repeat} runs; preliminary) ==")
    for key, value in params.items():
        print(f"  {key}: {value}")
    for r in rows:
        print(f"  {r['name']:<40} {r['median_s'] * 1e3:10.1f} ms {r['MBps']:10.1f} MB/s {r['items_per_s']:12.0f} items/s")
    for c in comparisons:
        mark = "meets" if c["meets_goal"] else "MISSES"
        print(f"  ratio {c['ours']} vs {c['baseline']}: {c['ratio']:.2f}x (goal >= {c['goal']}x: {mark})")
        if c.get("note"):
            print(f"    note: {c['note']}")
    for s in skipped:
        print(f"  skipped {s['name']}: {s['reason']}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(doc, indent=1))
    return doc


def _consume(samples: list[dict[str, Any]]) -> int:
    total = 0
    for sample in samples:
        for key, value in sample.items():
            if key != "__key__":
                total += value.nbytes
    return total


def read_all(ds: Any, order: np.ndarray | range, batch: int = 256) -> int:
    """Read every sample in ``order`` through ``ds.read_many`` in batches; returns bytes seen.

    Each batch is consumed and dropped before the next is read (as a training
    loop does after collating), so its window buffers go back to the pool.
    """
    total = 0
    order = np.asarray(order)
    for lo in range(0, len(order), batch):
        total += _consume(ds.read_many(order[lo : lo + batch]))
    return total
