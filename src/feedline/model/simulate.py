"""Discrete-event simulation of the read -> decode -> h2d -> gpu pipeline.

The analytic model (:func:`feedline.model.analyze`) assumes constant stage
times. Real read and decode times vary, and the training loop sees the *tail*:
one slow batch stalls the GPU even when the average keeps up. This simulator
replays per-batch stage times drawn from :mod:`feedline.model.distributions`
through the same pipeline shape a loader has:

- ``workers`` workers take batches round-robin (batch ``i`` on worker
  ``i % workers``, as ``torch.utils.data.DataLoader`` does); a worker spends
  ``read + decode`` on a batch.
- At most ``workers * prefetch`` batches are outstanding (being prepared or
  waiting); a batch leaves that queue when its host-to-device copy starts.
- One copy engine copies batches *in order* (``h2d``) into one of
  ``device_buffers`` device slots (2 = double buffering); a slot is reused once
  the GPU step that read it has finished.
- The GPU runs steps in order (``gpu``), each as soon as its batch has landed
  and the previous step is done.

A step's time is the gap between consecutive GPU step ends; its stall is the
part of that gap the GPU spent waiting for data. With constant times and
``prefetch >= 1``, ``device_buffers >= 2`` the mean step equals the analytic
``max((read + decode) / workers, h2d, gpu)``.

Cost: stage times are drawn vectorised with numpy and the event recurrence is
one tight loop over plain floats: about 1 us per step (10k steps in ~10-20 ms,
100k in ~0.1 s on one core).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from feedline.model.analytic import analyze
from feedline.model.distributions import Distribution, as_distribution

_NOISE_S = 1e-9


@dataclass(frozen=True)
class SimulationResult:
    """Step-time distribution and GPU occupancy of one simulated run (seconds).

    Statistics cover the ``steps`` measured steps after the warm-up.
    """

    steps: int
    warmup: int
    workers: int
    prefetch: int
    device_buffers: int
    step_mean: float
    step_p50: float
    step_p95: float
    step_p99: float
    step_max: float
    gpu_busy: float
    """Fraction of wall time the GPU computes."""
    data_stall: float
    """Fraction of wall time the GPU waits for data (``1 - gpu_busy``)."""
    stall_p99: float
    """99th percentile over steps of (stall / step time): how bad the bad steps are."""
    analytic_steady: float
    """The analytic steady state on the distributions' means, for comparison."""
    step_times: np.ndarray = field(repr=False, compare=False)
    stall_times: np.ndarray = field(repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able summary (without the per-step arrays)."""
        return {
            k: v for k, v in self.__dict__.items() if k not in ("step_times", "stall_times")
        }


MAX_STEPS = 5_000_000  # simulated steps (warm-up included): about 1.6 GB and 11 s on the 2-core VM


def _check_count(name: str, value: object, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be at most {maximum:,} (the simulator keeps every step in "
                         f"memory: 1 million steps take about 320 MB), got {value:,}")
    return value


def _gpu_end_times(
    prep: list[float],
    h2d: list[float],
    gpu: list[float],
    workers: int,
    depth: int,
    buffers: int,
) -> tuple[list[float], list[float]]:
    """Run the event recurrences; return (gpu_start, gpu_end) per batch."""
    n = len(prep)
    prep_end = [0.0] * n
    h_start = [0.0] * n
    g_start = [0.0] * n
    g_end = [0.0] * n
    h_end_prev = 0.0
    for i in range(n):
        # A worker starts batch i when it is free and a prefetch slot is free.
        s = prep_end[i - workers] if i >= workers else 0.0
        if i >= depth and h_start[i - depth] > s:
            s = h_start[i - depth]
        pe = s + prep[i]
        prep_end[i] = pe
        # The copy starts once the batch is ready, the engine is idle, a device slot is free.
        hs = pe if pe > h_end_prev else h_end_prev
        if i >= buffers and g_end[i - buffers] > hs:
            hs = g_end[i - buffers]
        h_start[i] = hs
        h_end_prev = hs + h2d[i]
        gs = h_end_prev
        if i and g_end[i - 1] > gs:
            gs = g_end[i - 1]
        g_start[i] = gs
        g_end[i] = gs + gpu[i]
    return g_start, g_end


def simulate(
    read: float | Distribution,
    decode: float | Distribution,
    h2d: float | Distribution,
    gpu: float | Distribution,
    *,
    workers: int = 1,
    prefetch: int = 2,
    device_buffers: int = 2,
    steps: int = 10_000,
    warmup: int | None = None,
    seed: int = 0,
) -> SimulationResult:
    """Simulate ``steps`` training steps and summarise step times and stalls.

    Args:
        read, decode, h2d, gpu: per-batch stage times, seconds or a
            :class:`~feedline.model.distributions.Distribution`.
        workers: loader workers sharing read + decode.
        prefetch: batches each worker may have outstanding (PyTorch's
            ``prefetch_factor``); the queue holds ``workers * prefetch``.
        device_buffers: device-side batch slots (2 = double buffering).
        steps: measured steps, after ``warmup``.
        warmup: steps simulated first and left out of the statistics
            (default ``workers * prefetch + device_buffers + 8``).
        seed: RNG seed; the same arguments and seed give the same result. Each
            stage draws from its own stream, so changing one stage's
            distribution leaves the other stages' draws unchanged.

    Raises:
        ValueError: a bad stage time or count (naming the argument).
        TypeError: a stage that is neither seconds nor a distribution.
    """
    dists = {
        name: as_distribution(value, name=name)
        for name, value in (("read", read), ("decode", decode), ("h2d", h2d), ("gpu", gpu))
    }
    _check_count("workers", workers, 1, MAX_STEPS)
    _check_count("prefetch", prefetch, 1, MAX_STEPS)
    _check_count("device_buffers", device_buffers, 1, MAX_STEPS)
    _check_count("steps", steps, 1, MAX_STEPS)
    _check_count("seed", seed, 0)  # numpy's SeedSequence takes no negative seed
    if warmup is None:
        warmup = workers * prefetch + device_buffers + 8
    _check_count("warmup", warmup, 0, MAX_STEPS)
    n = warmup + steps
    streams = np.random.SeedSequence(seed).spawn(len(dists))
    draws = {
        name: d.sample(np.random.default_rng(ss), n)
        for (name, d), ss in zip(dists.items(), streams, strict=True)
    }
    prep = (draws["read"] + draws["decode"]).tolist()
    g_start, g_end = _gpu_end_times(
        prep,
        draws["h2d"].tolist(),
        draws["gpu"].tolist(),
        workers,
        workers * prefetch,
        device_buffers,
    )
    return _summarise(np.asarray(g_start), np.asarray(g_end), dists, warmup, workers, prefetch, device_buffers)


def _summarise(
    g_start: np.ndarray,
    g_end: np.ndarray,
    dists: dict[str, Distribution],
    warmup: int,
    workers: int,
    prefetch: int,
    device_buffers: int,
) -> SimulationResult:
    prev_end = np.concatenate(([0.0], g_end[:-1]))
    step = (g_end - prev_end)[warmup:]
    stall = (g_start - prev_end)[warmup:]
    stall[stall < _NOISE_S] = 0.0  # float noise from summing long time lines
    wall = float(step.sum())
    stall_total = float(stall.sum())
    with np.errstate(divide="ignore", invalid="ignore"):
        stall_frac = np.where(step > 0, stall / np.where(step > 0, step, 1.0), 0.0)
    p50, p95, p99 = (float(v) for v in np.percentile(step, [50, 95, 99]))
    means = {k: d.mean for k, d in dists.items()}
    return SimulationResult(
        steps=len(step),
        warmup=warmup,
        workers=workers,
        prefetch=prefetch,
        device_buffers=device_buffers,
        step_mean=wall / len(step),
        step_p50=p50,
        step_p95=p95,
        step_p99=p99,
        step_max=float(step.max()),
        gpu_busy=(wall - stall_total) / wall if wall > 0 else 0.0,
        data_stall=stall_total / wall if wall > 0 else 0.0,
        stall_p99=float(np.percentile(stall_frac, 99)),
        analytic_steady=analyze(**means, workers=workers).steady,
        step_times=step,
        stall_times=stall,
    )


__all__ = ["SimulationResult", "simulate"]
