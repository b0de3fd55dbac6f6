"""The synthetic-batch check (seed 000, Q3): the same loop body without the data path.

Runs only when asked, and only after the measured steps of a run limited to
``steps`` (which the measuring tool ends anyway), so the user's run is never
changed: the loader that reached the limit hands out its last batch ``n`` more
times, then the run ends. On CUDA, the replayed batch's host-to-device copies
are served from the device tensors of the first replay (no copy), and each
replayed step is closed with a device synchronisation so host time is the
step's true time. The first replayed step (filling that cache) is not counted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NoReturn

from feedline.observe._clock import LoaderClock
from feedline.observe._torch_hooks import TorchHooks


class Replay:
    """Serves the last batch ``n`` times after the limit and times each replayed step.

    Args:
        n: replayed steps (>= 2; the first is not counted).
        device_type: ``"cuda"`` turns on the copy cache and per-step synchronisation.
    """

    def __init__(self, n: int, device_type: str) -> None:
        if n < 2:
            raise ValueError(f"replay must be >= 2, got {n!r}")
        self.n, self.device_type = n, device_type
        self.clock: LoaderClock | None = None
        self.times: list[float] = []
        self._hooks: TorchHooks | None = None

    def next(self, clock: LoaderClock, hooks: TorchHooks | None,
             end: Callable[[], NoReturn]) -> Any:
        """The batch for one replayed step of ``clock``, or ``end()`` once done."""
        if self.clock is None:
            if clock.last is None:
                end()
            self.clock, self._hooks = clock, hooks
            if hooks is not None and self.device_type == "cuda":
                hooks.replay = {}
        elif clock is not self.clock:
            end()  # another loader after the limit: the run is over
        self._sync()
        self.times.append(time.perf_counter())
        if len(self.times) > self.n:
            self.stop()
            end()
        return clock.last

    def stop(self) -> None:
        """Stop serving copies from the cache (idempotent)."""
        if self._hooks is not None:
            self._hooks.replay = None

    def _sync(self) -> None:
        if self.device_type == "cuda":
            import torch

            torch.cuda.synchronize()

    def steps(self) -> list[float]:
        """Durations of the counted replayed steps (the first one left out)."""
        return [b - a for a, b in zip(self.times[1:], self.times[2:], strict=False)]

    @property
    def started_at(self) -> float | None:
        """When the measured steps ended (the first replayed step began)."""
        return self.times[0] if self.times else None
