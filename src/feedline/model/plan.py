"""Capacity planning on the simulator: the smallest loader that keeps stalls low.

The analytic model answers "how many workers hide the *mean* data path"; with
variable read times that is not enough, because one slow batch stalls the GPU.
:func:`plan_pipeline` searches the simulator for the fewest workers, then the
shallowest prefetch queue, whose stalls stay under a target both at the p99
step and on average.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from feedline.model.distributions import Distribution
from feedline.model.simulate import SimulationResult, simulate


@dataclass(frozen=True)
class Plan:
    """A loader configuration found by :func:`plan_pipeline` and its simulated run."""

    workers: int
    prefetch: int
    max_stall: float
    result: SimulationResult

    def to_dict(self) -> dict[str, Any]:
        return {
            "workers": self.workers,
            "prefetch": self.prefetch,
            "max_stall": self.max_stall,
            "result": self.result.to_dict(),
        }


def meets(result: SimulationResult, max_stall: float) -> bool:
    """True when the p99 step's stall share and the overall stall share are both <= ``max_stall``."""
    return result.stall_p99 <= max_stall and result.data_stall <= max_stall


def plan_pipeline(
    read: float | Distribution,
    decode: float | Distribution,
    h2d: float | Distribution,
    gpu: float | Distribution,
    *,
    max_stall: float = 0.05,
    max_workers: int = 32,
    max_prefetch: int = 8,
    device_buffers: int = 2,
    steps: int = 5_000,
    seed: int = 0,
) -> Plan | None:
    """Fewest workers, then fewest prefetch batches per worker, meeting ``max_stall``.

    A configuration passes when, over ``steps`` simulated steps, the 99th
    percentile of per-step stall share (stall / step time) and the overall
    data-stall fraction are both at most ``max_stall``. For each worker count
    the deepest queue is tried first (one simulation rules the count out), then
    depths are scanned from 1 upward. All runs share ``seed``, so they see the
    same stage-time draws (common random numbers).

    Returns:
        The first passing :class:`Plan`, or ``None`` when nothing up to
        ``max_workers`` x ``max_prefetch`` passes (e.g. ``h2d`` slower than
        ``gpu``: no loader setting helps then).

    Cost: at most ``max_workers + max_prefetch`` simulations of ``steps`` steps.

    Raises:
        ValueError: ``max_stall`` outside [0, 1], or a bad count or stage time.
    """
    if isinstance(max_stall, bool) or not isinstance(max_stall, (int, float)):
        raise ValueError(f"max_stall must be a fraction in [0, 1], got {max_stall!r}")
    if not (math.isfinite(max_stall) and 0 <= max_stall <= 1):
        raise ValueError(f"max_stall must be a fraction in [0, 1], got {max_stall!r}")
    for name, value in (("max_workers", max_workers), ("max_prefetch", max_prefetch)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")

    def run(workers: int, prefetch: int) -> SimulationResult:
        return simulate(
            read, decode, h2d, gpu,
            workers=workers, prefetch=prefetch, device_buffers=device_buffers,
            steps=steps, seed=seed,
        )

    for workers in range(1, max_workers + 1):
        deepest = run(workers, max_prefetch)
        if not meets(deepest, max_stall):
            continue
        for prefetch in range(1, max_prefetch):
            result = run(workers, prefetch)
            if meets(result, max_stall):
                return Plan(workers, prefetch, float(max_stall), result)
        return Plan(workers, max_prefetch, float(max_stall), deepest)
    return None


__all__ = ["Plan", "meets", "plan_pipeline"]
