"""What do diagnose's hooks cost a training step, on warm and on cold caches?

Question: how many microseconds does a diagnose ``Session`` (the hooks ``feedline
diagnose`` installs in the training process) add to one step of a small training loop,
and where (next, forward, backward, optimizer step)? Baseline: the same loop without
the session, in the same process, alternating passes (plain, measured, plain, ...).

Two regimes: *warm*, steps back to back (the hooks' own instructions), and *cold*, a
``--sleep-ms`` pause before each step as a 10 ms GPU step leaves the host (caches and
branch predictors cold: a step's own work grows 3-4x, and so does the hooks' cost; this
is what ``bench/diagnose_overhead.py`` sees end to end). Figures are the minimum (warm)
or median (cold) over ``--repeat`` passes of each kind. The host sampler thread is not
started, so the figures are the hooks' alone.

    .venv/bin/python bench/hook_cost.py [--quick] [--repeat N] [--steps N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from feedline.observe._session import Session

PHASES = ("next", "forward", "backward", "optimizer")


def make_loop(steps: int) -> Any:
    torch.set_num_threads(1)
    data = TensorDataset(torch.randn(steps * 32, 64), torch.arange(steps * 32))
    loader = DataLoader(data, batch_size=32, num_workers=0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def one_pass(sleep_s: float) -> list[list[float]]:
        """Per step: seconds in next(), the forward, loss and backward, the optimizer step."""
        out: list[list[float]] = []
        it = iter(loader)
        while True:
            if sleep_s:
                time.sleep(sleep_s)
            t0 = time.perf_counter()
            try:
                x, _ = next(it)
            except StopIteration:
                return out
            t1 = time.perf_counter()
            y = model(x)
            t2 = time.perf_counter()
            loss = y.square().mean()
            opt.zero_grad()
            loss.backward()
            t3 = time.perf_counter()
            opt.step()
            out.append([t1 - t0, t2 - t1, t3 - t2, time.perf_counter() - t3])

    return one_pass


def measured(one_pass: Any, sleep_s: float) -> list[list[float]]:
    s = Session("bench", "cpu")
    s.sampler.start = lambda: s.sampler  # type: ignore[method-assign]  # the hooks' cost alone
    s.sampler.stop = lambda: None  # type: ignore[method-assign]
    s.start()
    try:
        return one_pass(sleep_s)
    finally:
        s.stop()


def per_phase(steps: list[list[float]], cold: bool) -> list[float]:
    cols = list(zip(*steps[5:], strict=True))  # the first steps warm the pass up
    return [statistics.median(c) if cold else statistics.mean(c) for c in cols]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small size for smoke tests")
    p.add_argument("--repeat", type=int, default=None, help="passes of each kind (default 9)")
    p.add_argument("--steps", type=int, default=None, help="steps a pass (default 200 warm, 60 cold)")
    p.add_argument("--sleep-ms", type=float, default=10.0, help="pause before each cold step")
    p.add_argument("--json", default=None, help="write results to this JSON file")
    args = p.parse_args(argv)
    repeat = args.repeat or (2 if args.quick else 9)
    result: dict[str, Any] = {"question": "per-step cost of diagnose's hooks (no host sampler)",
                              "repeat": repeat, "phases": list(PHASES)}
    for regime, sleep_s, default_steps in (("warm", 0.0, 200), ("cold", args.sleep_ms / 1e3, 60)):
        steps = args.steps or (20 if args.quick else default_steps)
        one_pass = make_loop(steps)
        one_pass(sleep_s)
        measured(one_pass, sleep_s)  # warm-up: imports, first hooks
        plain: list[list[float]] = []
        hooked: list[list[float]] = []
        for _ in range(repeat):
            plain.append(per_phase(one_pass(sleep_s), cold=bool(sleep_s)))
            hooked.append(per_phase(measured(one_pass, sleep_s), cold=bool(sleep_s)))
        pick = statistics.median if sleep_s else min
        base = [pick(r[i] for r in plain) for i in range(len(PHASES))]
        with_hooks = [pick(r[i] for r in hooked) for i in range(len(PHASES))]
        delta = {ph: (h - b) * 1e6 for ph, b, h in zip(PHASES, base, with_hooks, strict=True)}
        step_us = sum(base) * 1e6
        result[regime] = {"steps_per_pass": steps, "sleep_ms": sleep_s * 1e3,
                          "plain_step_us": step_us, "hooks_us": delta,
                          "hooks_total_us": sum(delta.values())}
        print(f"{regime}: step's own work {step_us:7.1f} us, hooks "
              + ", ".join(f"{ph} {d:+.1f}" for ph, d in delta.items())
              + f" = {sum(delta.values()):+.1f} us a step")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=1)
    return result


if __name__ == "__main__":
    main()
