"""What a process pays from ``import`` to its first batch: feedline's loaders against torch's
DataLoader on the same data, and the CLI's start.

Every run is a fresh Python process (as a script that builds its loader is), contenders
interleaved (A, B, C, ... A, B, C ...). Per run, CPU seconds of the process tree (the host
is shared: CPU time, not wall time, is what other load does not inflate; wall is printed
too) for each step: ``import torch``; ``import feedline`` and the name's lookup; building
the loader (``make``); from ``iter`` to batch 0 (``first``); then a *second* loader over the
same data in the same process, built and run to its first batch (``again``: a validation
loader per epoch, a loader per fold). Medians over ``--rounds`` and the ratio of
make + first to the DataLoader's.

Contenders, on ``--n`` samples of a 784-byte ``.npy`` + a ``.cls`` label, batch 64, 2 workers:
``Loader`` over the packed shards (threads), ``Loader`` over a map-style Dataset of the
original files (threads), ``Loader`` with forked process workers, ``feedline.wrap`` of the
DataLoader, and ``torch.utils.data.DataLoader(num_workers=2)`` over the original files.
CLI rows: ``feedline --help``, ``feedline --version``, ``feedline diagnose -- python -c
pass`` (the CPU of the whole tree, the measured command included).

    .venv/bin/python bench/startup.py [--quick] [--rounds 5] [--n 20000] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CONTENDERS = ("Loader", "Loader(map)", "Loader(fork)", "wrap", "DataLoader")
STEPS = ("torch", "feedline", "make", "first", "again")

CHILD = r'''
import json, os, sys, time
import psutil  # before the clock starts: the measuring tool's own cost
me = psutil.Process()

def cpu():
    total = 0.0
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total

marks = [(cpu(), time.perf_counter())]
def mark():
    marks.append((cpu(), time.perf_counter()))

kind, folder, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
import torch
mark()
if kind != "DataLoader":
    import feedline
    feedline.Loader
sys.path.insert(0, sys.argv[4])  # after: peers_shapes puts this checkout's src/ first
from peers_shapes import Files
from torch.utils.data import DataLoader
mark()
files = os.path.join(folder, "files")

def make():
    if kind == "Loader":
        return feedline.Loader(os.path.join(folder, "ds"), batch_size=64, workers=workers)
    if kind == "Loader(map)":
        return feedline.Loader(Files(files), batch_size=64, workers=workers)
    if kind == "Loader(fork)":
        return feedline.Loader(os.path.join(folder, "ds"), batch_size=64, workers=workers,
                               worker_type="process", start_method="fork")
    dl = DataLoader(Files(files), batch_size=64, shuffle=True, num_workers=workers)
    return feedline.wrap(dl, device="cpu") if kind == "wrap" else dl

def close(loader):
    getattr(loader, "close", lambda: None)()

loader = make()
mark()
batch = next(iter(loader))
mark()
second = make()
next(iter(second))
mark()
close(second)
close(loader)
cpu_s = [b[0] - a[0] for a, b in zip(marks, marks[1:])]
wall_s = [b[1] - a[1] for a, b in zip(marks, marks[1:])]
print(json.dumps({"cpu": cpu_s, "wall": wall_s, "samples": len(batch["cls"]),
                  "feedline": sys.modules["feedline"].__file__ if "feedline" in sys.modules else None}))
'''


def run_child(kind: str, folder: Path, workers: int) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-c", CHILD, kind, str(folder), str(workers), str(HERE)],
                         capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise SystemExit(f"{kind} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_cli(args: list[str]) -> tuple[float, float]:
    """CPU seconds (the whole tree, reaped) and wall seconds of one ``feedline`` command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "feedline", *args], capture_output=True, timeout=300, check=False)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


CLI = {"--help": ["--help"], "--version": ["--version"],
       "diagnose -- python -c pass": ["diagnose", "--quiet", "--", sys.executable, "-c", "pass"]}


def measure(folder: Path, rounds: int, workers: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in CONTENDERS}
    cli: dict[str, list[tuple[float, float]]] = {k: [] for k in CLI}
    for _ in range(rounds):
        for kind in CONTENDERS:
            runs[kind].append(run_child(kind, folder, workers))
        for name, args in CLI.items():
            cli[name].append(run_cli(args))
    rows = []
    for kind, rs in runs.items():
        med = {what: [statistics.median(r[what][i] for r in rs) for i in range(len(STEPS))]
               for what in ("cpu", "wall")}
        rows.append({"contender": kind, "samples": rs[0]["samples"], "feedline_from": rs[0]["feedline"],
                     **{f"{s}_cpu_s": med["cpu"][i] for i, s in enumerate(STEPS)},
                     **{f"{s}_wall_s": med["wall"][i] for i, s in enumerate(STEPS)},
                     "load": os.getloadavg()[0]})
    base = next(r for r in rows if r["contender"] == "DataLoader")
    for r in rows:
        r["ratio_cpu"] = ((r["make_cpu_s"] + r["first_cpu_s"])
                          / max(base["make_cpu_s"] + base["first_cpu_s"], 1e-9))
    cli_rows = [{"command": name, "cpu_s": statistics.median(c for c, _ in v),
                 "wall_s": statistics.median(w for _, w in v)} for name, v in cli.items()]
    return {"rounds": rounds, "workers": workers, "loaders": rows, "cli": cli_rows}


def show(res: dict[str, Any]) -> None:
    print(f"CPU seconds of the process tree, medians of {res['rounds']} rounds "
          f"({res['workers']} workers; wall in brackets); ratio: make + first vs DataLoader's")
    print(f"{'contender':<13}" + "".join(f"{s:>17}" for s in STEPS) + f"{'ratio':>8}")
    for r in res["loaders"]:
        cells = "".join(f"{r[s + '_cpu_s']:>8.3f} [{r[s + '_wall_s']:>6.3f}]" for s in STEPS)
        print(f"{r['contender']:<13}{cells}{r['ratio_cpu']:>7.2f}x")
    for c in res["cli"]:
        print(f"feedline {c['command']:<28} cpu {c['cpu_s']:.3f} s  wall {c['wall_s']:.3f} s")
    where = next((r["feedline_from"] for r in res["loaders"] if r["feedline_from"]), None)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; feedline from {where}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="256 samples, 1 round (smoke test)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--n", type=int, default=20_000, help="samples")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    sys.path.insert(0, str(HERE))
    import peers_shapes as ps

    n, rounds = (256, 1) if args.quick else (args.n, args.rounds)
    scratch = Path(tempfile.mkdtemp(prefix="feedline-startup-"))
    try:
        folder = ps.build("mnist", n, scratch / "mnist")
        res = measure(folder, rounds, args.workers)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    show(res)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
