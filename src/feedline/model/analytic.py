"""The analytic stage model of seed 000: serial = sum, steady state = slowest stage.

With ``num_workers`` workers sharing read and decode, the steady-state step is
``max((T_read + T_decode) / num_workers, T_h2d, T_gpu)``. Pure Python, no torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

STAGES = ("read", "decode", "h2d", "gpu")


def _check_times(times: Sequence[float], names: Sequence[str] | None = None) -> None:
    for i, t in enumerate(times):
        label = names[i] if names else f"stage {i}"
        if isinstance(t, bool) or not isinstance(t, (int, float)):
            raise ValueError(f"invalid stage times: {label} is {t!r}, not a number")
        if math.isnan(t) or math.isinf(t) or t < 0:
            raise ValueError(f"invalid stage times: {label} = {t!r} (must be finite and >= 0)")


def pipeline_times(stage_times: Sequence[float]) -> tuple[float, float]:
    """Serial and steady-state step time of fully overlapped stages.

    Serial is the sum of the stage times; steady state is the slowest stage.

    Raises:
        ValueError: empty input, or a negative, NaN or infinite time.
    """
    if not stage_times:
        raise ValueError("invalid stage times: empty")
    _check_times(stage_times)
    serial = sum(stage_times)
    steady_state = max(stage_times)
    return serial, steady_state


@dataclass(frozen=True)
class PipelineAnalysis:
    """What the stage model says about one set of stage times (seconds)."""

    read: float
    decode: float
    h2d: float
    gpu: float
    workers: int
    serial: float
    """Step time when nothing overlaps: read + decode + h2d + gpu."""
    steady: float
    """Steady-state step time: max((read + decode) / workers, h2d, gpu)."""
    binding: str
    """The stage that sets the steady state: "read", "decode", "h2d" or "gpu"."""
    utilisation_serial: float
    """GPU busy fraction when serial: gpu / serial."""
    utilisation_pipelined: float
    """GPU busy fraction in steady state: gpu / steady."""
    speedup: float
    """serial / steady."""
    workers_needed: int | None
    """Fewest workers with (read + decode) / workers <= gpu; None if gpu is 0."""

    @property
    def data_bound(self) -> bool:
        return self.binding in ("read", "decode", "h2d")

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def workers_needed(read: float, decode: float, gpu: float) -> int | None:
    """The fewest workers that hide read + decode behind the GPU step.

    Returns ``None`` when ``gpu`` is zero and the data path is not (nothing can
    hide behind a zero-length step); at least 1.
    """
    _check_times([read, decode, gpu], ["read", "decode", "gpu"])
    data = read + decode
    if data == 0:
        return 1
    if gpu == 0:
        return None
    # Tolerate float noise: 0.02 / 0.02 must be 1 worker, not 2.
    return max(1, math.ceil(data / gpu - 1e-9))


def analyze(
    read: float, decode: float, h2d: float, gpu: float, *, workers: int = 1
) -> PipelineAnalysis:
    """Apply the worker-aware stage model to measured stage times (seconds).

    Ties go to the later stage: when the data path and the GPU step take the
    same time, the run is called GPU-bound (the goal state).

    Raises:
        ValueError: a negative, NaN or infinite time, or ``workers < 1``.
    """
    _check_times([read, decode, h2d, gpu], STAGES)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    serial = read + decode + h2d + gpu
    data = (read + decode) / workers
    steady = max(data, h2d, gpu)
    if gpu >= steady:
        binding = "gpu"
    elif h2d >= steady:
        binding = "h2d"
    else:
        binding = "read" if read >= decode else "decode"
    return PipelineAnalysis(
        read=read,
        decode=decode,
        h2d=h2d,
        gpu=gpu,
        workers=workers,
        serial=serial,
        steady=steady,
        binding=binding,
        utilisation_serial=gpu / serial if serial > 0 else 0.0,
        utilisation_pipelined=gpu / steady if steady > 0 else 0.0,
        speedup=serial / steady if steady > 0 else 1.0,
        workers_needed=workers_needed(read, decode, gpu),
    )
