"""Shared plumbing of the bench/loader_*.py benchmarks (not a benchmark itself).

Each loader benchmark builds its data in a scratch folder, warms up every
contender once (worker start-up and page cache are not what is measured),
times ``--repeat`` epochs of each, and prints medians with a ratio against a
baseline measured in the same run. ``--json PATH`` writes the same results.
Numbers from a shared machine are preliminary.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import read_common


def parser(description: str) -> argparse.ArgumentParser:
    """The read benchmarks' options (--quick, --json, --repeat, --dir, --keep, --samples)
    plus --device."""
    p = read_common.parser(description)
    p.add_argument("--device", default="cpu", help='"cpu" or "cuda:0"')
    return p


scratch = read_common.scratch


class Report:
    """Rows of timed contenders and ratios between them."""

    def __init__(self, name: str, args: argparse.Namespace, **params: Any) -> None:
        self.doc: dict[str, Any] = {
            "benchmark": name, "quick": bool(args.quick), "preliminary": True,
            "repeat": args.repeat, "params": params, "rows": [], "comparisons": [],
            "host": {"python": platform.python_version(), "cpus": os.cpu_count()},
        }
        self.args = args

    def time(self, name: str, run: Callable[[], int], *, warmup: bool = True) -> dict[str, Any]:
        """Time ``run`` (returns the samples it processed) ``--repeat`` times."""
        if warmup:
            run()
        runs, count = [], 0
        for _ in range(max(1, self.args.repeat)):
            t0 = time.perf_counter()
            count = run()
            runs.append(time.perf_counter() - t0)
        med = statistics.median(runs)
        row = {"name": name, "median_s": med, "runs_s": runs, "samples": count,
               "samples_per_s": count / med if med > 0 else float("inf")}
        self.doc["rows"].append(row)
        print(f"{name:<40} {med * 1e3:9.1f} ms  {row['samples_per_s']:12.0f} samples/s")
        return row

    def add(self, row: dict[str, Any]) -> None:
        self.doc["rows"].append(row)

    def compare(self, ours: str, baseline: str, goal: float, *, key: str = "samples_per_s",
                higher_is_better: bool = True) -> float:
        rows = {r["name"]: r for r in self.doc["rows"]}
        a, b = rows[ours][key], rows[baseline][key]
        ratio = a / b if higher_is_better else b / a
        self.doc["comparisons"].append({"ours": ours, "baseline": baseline, "ratio": ratio,
                                        "goal": goal, "meets_goal": ratio >= goal, "key": key})
        print(f"  {ours} vs {baseline}: {ratio:.2f}x (goal >= {goal}x)")
        return ratio

    def per_round(self, ours: str, baseline: str, goal: float) -> dict[str, Any]:
        """Ours vs ``baseline`` round by round (a round's runs share the machine's load).

        The ratio is the median of the per-round ratios (robust to load that changes
        during the run); the ratio of the medians is kept next to it. Needs rows with
        ``runs_s`` from interleaved rounds.
        """
        rows = {r["name"]: r for r in self.doc["rows"]}
        a, b = rows[ours], rows[baseline]
        ratios = [(a["samples"] / ta) / (b["samples"] / tb)
                  for ta, tb in zip(a["runs_s"], b["runs_s"], strict=True)]
        ratio = statistics.median(ratios)
        medians = a["samples_per_s"] / b["samples_per_s"]
        comparison = {"ours": ours, "baseline": baseline, "ratio": ratio, "goal": goal,
                      "meets_goal": ratio >= goal, "key": "samples_per_s", "per_round": ratios,
                      "ratio_of_medians": medians}
        self.doc["comparisons"].append(comparison)
        print(f"  {ours} vs {baseline}: {ratio:.2f}x median per round (goal >= {goal}x); rounds "
              + " ".join(f"{x:.2f}" for x in ratios) + f"; ratio of medians {medians:.2f}x")
        return comparison

    def finish(self) -> int:
        if self.args.json:
            Path(self.args.json).write_text(json.dumps(self.doc, indent=2))
        return 0
