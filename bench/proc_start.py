"""Where a process loader's first batch goes, by start method, against torch's DataLoader.

Every run is a fresh Python process, as a training script is (``import torch``, build the
loader, one epoch), so the forkserver's start and its torch import are paid where a real
run pays them. Contenders, interleaved (A, B, C, D, A, B, C, D...): ``Loader``
process workers with ``start_method="forkserver"`` (the default), ``"fork"``, and thread
workers, and ``torch.utils.data.DataLoader(num_workers=W)`` over the original files
(``bench/peers_shapes.py``'s baselines, which fork). Per run: ``import_s`` (torch +
feedline), ``make_s`` (building the loader), ``first_s`` (from ``iter`` to batch 0),
``start_s`` (process workers: until every worker was ready; the rest of ``first_s`` is the
probe batch, the arena and the delivery), CPU seconds of the process tree until batch 0,
the epoch's wall time from ``import`` on (``epoch_s``) and samples/s after batch 0.
Medians over ``--rounds`` rounds and the ratio of ``epoch_s`` and of the rate to the
DataLoader's. For the forkserver, the pickled job context's size and its load time are
printed too (what each spawned or forkserver worker unpickles).

    .venv/bin/python bench/proc_start.py [--shapes folder,photos] [--rounds 5] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONTENDERS = ("forkserver", "fork", "thread", "DataLoader")

CHILD = r'''
import json, os, sys, time
t0 = time.perf_counter()
import torch
sys.path.insert(0, sys.argv[4])
import peers_shapes as ps
import_s = time.perf_counter() - t0
kind, shape, folder, workers = sys.argv[1], sys.argv[2], ps.Path(sys.argv[3]), int(sys.argv[5])
t1 = time.perf_counter()
if kind == "DataLoader":
    it = ps.baseline(shape, folder, workers)()
else:
    import functools
    import feedline
    make = ps.loader(shape, folder, workers, "thread" if kind == "thread" else "process")
    real = feedline.Loader
    if kind != "thread":
        feedline.Loader = functools.partial(real, start_method=kind)
    it = make()
    feedline.Loader = real
made = time.perf_counter()
n = n0 = 0
cpu0 = 0.0
for k, batch in enumerate(it):
    n += ps._len(batch)
    if k == 0:
        first = time.perf_counter()
        n0, cpu0 = n, ps._cpu_s()
end = time.perf_counter()
out = {"import_s": import_s, "make_s": made - t1, "first_s": first - made, "cpu_first_s": cpu0,
       "epoch_s": end - t0, "rate": (n - n0) / (end - first), "samples": n}
stats = getattr(it, "stats", None)
if stats is not None and "processes" in stats:
    out.update(start_s=stats["processes"]["start_s"], used=stats["processes"]["start_method"],
               why=stats["processes"]["why_not_fork"])
if kind == "forkserver":
    import pickle
    from feedline.pipeline import _by_reference
    data = _by_reference.dumps(it._rt.ctx)
    t = time.perf_counter(); pickle.loads(data); out["ctx_load_s"] = time.perf_counter() - t
    out["ctx_bytes"] = len(data)
close = getattr(it, "close", None)
if callable(close):
    close()
print("RESULT " + json.dumps(out))
'''


def run(kind: str, shape: str, folder: Path, workers: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": os.fspath(HERE.parent / "src")}
    proc = subprocess.run([sys.executable, "-c", CHILD, kind, shape, os.fspath(folder), os.fspath(HERE),
                           str(workers)], env=env, capture_output=True, text=True, timeout=600)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not line:
        raise SystemExit(f"{kind} {shape} failed:\n{proc.stderr[-3000:]}")
    res: dict[str, float] = json.loads(line[-1][7:])
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="folder,photos")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="tiny datasets (smoke test)")
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    sys.path.insert(0, os.fspath(HERE))
    sys.path.insert(0, os.fspath(HERE.parent / "src"))
    import peers_shapes as ps

    scratch = Path(tempfile.mkdtemp(prefix="proc-start-"))
    report = []
    try:
        for shape in [s for s in args.shapes.split(",") if s]:
            folder = ps.build(shape, (ps.QUICK if args.quick else ps.FULL)[shape], scratch / shape)
            runs: dict[str, list[dict[str, float]]] = {k: [] for k in CONTENDERS}
            for r in range(args.rounds):  # interleaved, order rotated each round
                order = CONTENDERS[r % len(CONTENDERS):] + CONTENDERS[:r % len(CONTENDERS)]
                for kind in order:
                    runs[kind].append(run(kind, shape, folder, args.workers))
            base = {m: statistics.median(x[m] for x in runs["DataLoader"]) for m in ("epoch_s", "rate")}
            for kind, rs in runs.items():
                med = {m: statistics.median(x[m] for x in rs) for m in rs[0] if isinstance(rs[0][m], (int, float))}
                used = {str(x.get("used")) for x in rs} - {"None"}
                row = {"shape": shape, "contender": kind, **med, "used": sorted(used),
                       "epoch_ratio": base["epoch_s"] / med["epoch_s"], "rate_ratio": med["rate"] / base["rate"],
                       "first_min_max": (min(x["first_s"] for x in rs), max(x["first_s"] for x in rs))}
                report.append(row)
                extra = (f" start {med['start_s']:.3f}" if "start_s" in med else "") + (
                    f" ctx {med['ctx_bytes'] / 1e3:.0f} kB load {med['ctx_load_s'] * 1e3:.1f} ms"
                    if "ctx_bytes" in med else "")
                print(f"{shape:7s} {kind:10s} import {med['import_s']:.2f} make {med['make_s']:.2f} "
                      f"first {med['first_s']:.3f} [{row['first_min_max'][0]:.2f}-{row['first_min_max'][1]:.2f}] "
                      f"cpu@first {med['cpu_first_s']:.2f} epoch {med['epoch_s']:.2f} s "
                      f"({row['epoch_ratio']:.2f}x DL) rate {med['rate']:.0f}/s ({row['rate_ratio']:.2f}x DL)"
                      f"{extra}  load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
