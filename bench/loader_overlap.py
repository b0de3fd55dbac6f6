"""Overlap: does the loader hide the data path behind the consumer's step?

The consumer's step is a fixed-time wait that releases the GIL (``time.sleep``
stands in for a GPU step: it is the workload here, not synchronisation). The
data path is a per-sample transform that also releases the GIL, with a known
cost. Two cases, each measured against the step alone in the same run:

* data path faster than the step: step time with the loader should be within
  5% of the step alone (data stall < 5%);
* short epochs back to back (4 batches each, ``set_epoch`` in the loop), data
  path faster than the step: the stall over every batch, epoch starts included,
  should stay under 5% (each new epoch's first batches are prepared ahead);
* data path slower than the step: the measured step time should be within 10%
  of ``feedline.model.analyze``'s steady-state prediction
  (``max((read + decode) / workers, h2d, gpu)``), fed with stage times
  measured in the same run: the data path alone (one worker, no step) and the
  step's own duration.

Step times are steady-state means of the interval between batches (the first
two intervals, while the pipeline fills, are dropped), medians over --repeat.

    .venv/bin/python bench/loader_overlap.py [--quick] [--json PATH] [--repeat N]
"""

from __future__ import annotations

import functools
import sys
import time
from typing import Any

import numpy as np

from loader_common import Report, parser


class Tiny:
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"x": np.full(16, i, np.float32)}


def slow_sample(sample: dict[str, Any], cost: float) -> dict[str, Any]:
    time.sleep(cost)  # the decode cost of one sample (releases the GIL like a real codec)
    return sample


def _steady(stamps: list[float]) -> float:
    """Mean interval between batches after the pipeline has filled (first 2 dropped; a
    mean, because workers finishing together make intervals alternate short/long)."""
    return (stamps[-1] - stamps[2]) / (len(stamps) - 3)


def _serial_data_time(batches: int, batch_size: int, sample_cost: float) -> float:
    """The data path's own time per batch, measured alone: one worker, no consumer step
    (the stage time the model takes as read + decode)."""
    import feedline

    with feedline.Loader(Tiny(batches * batch_size), batch_size=batch_size, workers=1,
                         prefetch=2, shuffle=False,
                         transform=functools.partial(slow_sample, cost=sample_cost)) as one:
        list(one)
        stamps = [time.perf_counter()]
        for _ in one:
            stamps.append(time.perf_counter())
    return _steady(stamps)


def run_case(name: str, report: Report, *, step: float, sample_cost: float, batches: int,
             batch_size: int, workers: int, repeat: int) -> dict[str, Any]:
    import feedline
    from feedline.model import analyze

    loader = feedline.Loader(Tiny(batches * batch_size), batch_size=batch_size, workers=workers,
                             prefetch=2, shuffle=False,
                             transform=functools.partial(slow_sample, cost=sample_cost))
    with_loader, alone, step_costs = [], [], []
    list(loader)  # warm-up: threads started, layout known
    for _ in range(max(1, repeat)):
        stamps = [time.perf_counter()]
        for _ in loader:
            t0 = time.perf_counter()
            time.sleep(step)  # the consumer's step
            step_costs.append(time.perf_counter() - t0)
            stamps.append(time.perf_counter())
        with_loader.append(_steady(stamps))
        stamps = [time.perf_counter()]
        for _ in range(batches):
            time.sleep(step)
            stamps.append(time.perf_counter())
        alone.append(_steady(stamps))
    loader.close()
    measured, base = float(np.median(with_loader)), float(np.median(alone))
    decode = _serial_data_time(batches, batch_size, sample_cost)
    gpu = float(np.median(step_costs))
    predicted = analyze(0.0, decode, 0.0, gpu, workers=workers).steady
    for label, value in (("step alone", base), ("step + loader", measured)):
        report.add({"name": f"{name}: {label}", "median_s": value, "runs_s": [value],
                    "samples": batch_size, "samples_per_s": batch_size / value})
    out = {"case": name, "step_set_s": step, "step_s": gpu, "data_s_per_batch": decode,
           "workers": workers,
           "measured_step_s": measured, "alone_step_s": base, "predicted_step_s": predicted,
           "stall_fraction": max(0.0, 1 - base / measured),
           "error_vs_model": abs(measured - predicted) / predicted}
    print(f"{name}: {measured * 1e3:.2f} ms/step with the loader, {base * 1e3:.2f} ms alone, "
          f"model {predicted * 1e3:.2f} ms (data {decode * 1e3:.2f} ms/batch serial)")
    return out


def run_epochs(name: str, report: Report, *, step: float, sample_cost: float, batches: int,
               epochs: int, batch_size: int, workers: int, repeat: int) -> dict[str, Any]:
    """Short epochs back to back (``set_epoch`` in the loop, as in training): the step
    time over every batch, epoch starts included, against the step alone."""
    import feedline

    loader = feedline.Loader(Tiny(batches * batch_size), batch_size=batch_size, workers=workers,
                             prefetch=2, seed=0,
                             transform=functools.partial(slow_sample, cost=sample_cost))
    with_loader, alone = [], []
    list(loader)  # warm-up: threads started, layout known
    for r in range(max(1, repeat)):
        t0 = time.perf_counter()
        for epoch in range(1 + r * epochs, 1 + (r + 1) * epochs):
            loader.set_epoch(epoch)
            for _ in loader:
                time.sleep(step)  # the consumer's step
        with_loader.append((time.perf_counter() - t0) / (epochs * batches))
        t0 = time.perf_counter()
        for _ in range(epochs * batches):
            time.sleep(step)
        alone.append((time.perf_counter() - t0) / (epochs * batches))
    loader.close()
    measured, base = float(np.median(with_loader)), float(np.median(alone))
    for label, value in (("step alone", base), ("step + loader", measured)):
        report.add({"name": f"{name}: {label}", "median_s": value, "runs_s": [value],
                    "samples": batch_size, "samples_per_s": batch_size / value})
    out = {"case": name, "step_set_s": step, "epochs": epochs, "batches_per_epoch": batches,
           "measured_step_s": measured,
           "alone_step_s": base, "stall_fraction": max(0.0, 1 - base / measured)}
    print(f"{name}: {measured * 1e3:.2f} ms/step with the loader, {base * 1e3:.2f} ms alone "
          f"({epochs} epochs of {batches} batches, epoch starts included)")
    return out


def main(argv: list[str] | None = None) -> int:
    args = parser(__doc__.splitlines()[0]).parse_args(argv)
    batches = args.samples or (10 if args.quick else 60)
    report = Report("loader_overlap", args, batches=batches)
    fast = run_case("data faster than step", report, step=0.04, sample_cost=0.0005,
                    batches=batches, batch_size=16, workers=2, repeat=args.repeat)
    slow = run_case("data slower than step", report, step=0.01, sample_cost=0.002,
                    batches=batches, batch_size=16, workers=2, repeat=args.repeat)
    short = run_epochs("short epochs", report, step=0.04, sample_cost=0.002, batches=4,
                       epochs=3 if args.quick else 10, batch_size=16, workers=2,
                       repeat=args.repeat)
    report.doc["cases"] = [fast, slow, short]
    report.doc["comparisons"] = [
        {"ours": "data faster than step: step + loader",
         "baseline": "data faster than step: step alone", "key": "stall_fraction",
         "ratio": 1 - fast["stall_fraction"], "goal": 0.95,
         "meets_goal": fast["stall_fraction"] <= 0.05},
        {"ours": "data slower than step: step + loader", "baseline": "stage model",
         "key": "error_vs_model", "ratio": 1 - slow["error_vs_model"], "goal": 0.9,
         "meets_goal": slow["error_vs_model"] <= 0.10},
        {"ours": "short epochs: step + loader", "baseline": "short epochs: step alone",
         "key": "stall_fraction", "ratio": 1 - short["stall_fraction"], "goal": 0.95,
         "meets_goal": short["stall_fraction"] <= 0.05},
    ]
    print(f"  stall (fast data): {fast['stall_fraction']:.1%} (goal < 5%); "
          f"error vs model (slow data): {slow['error_vs_model']:.1%} (goal < 10%); "
          f"stall over short epochs: {short['stall_fraction']:.1%} (goal < 5%: the next "
          "epoch's first batches are prepared ahead)")
    return report.finish()


if __name__ == "__main__":
    sys.exit(main())
