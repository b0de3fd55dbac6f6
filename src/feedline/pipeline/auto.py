"""``worker_type="auto"``: threads or processes, decided by measuring the first batches.

The loader starts with thread workers. Each batch a thread prepares after the
probe (batch 0) is timed: wall time, the thread's CPU time, and the time it
was runnable but waiting for a core (Linux ``/proc/thread-self/schedstat``; a
busy host or more workers than cores show up there, not as a lower share). The
rest of the wall time the thread was *blocked*. With every worker busy, a
thread running code that releases the GIL (simplejpeg, numpy copies, reads
from the page cache) is rarely blocked: its CPU share of the time not waiting
for a core stays near 1. Threads running Python take turns on the GIL, and each
gets about ``1 / workers`` of it. When the median share is below
:data:`GIL_BOUND`, the loader moves to process workers for every batch
submitted after that; otherwise it keeps threads. Work blocked on slow storage
also shows a low share; processes read just as well, so that choice costs
only their start-up.

Batches keep their content and order either way (both kinds run the same
plan; the consumer takes batches in plan order). The decision, the figures
and the reason are in ``loader.stats["auto"]``. This module does not import
torch.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any

GIL_BOUND = 0.7
"""A median CPU share (of the time not waiting for a core) below this: GIL-bound."""


MIN_SECONDS = 0.2
"""Measure batches after the probe until at least this much wall time is covered (short
batches are below the scheduler's accounting grain)."""


def thread_clock() -> tuple[float, float]:
    """(CPU seconds, seconds runnable but waiting for a core) of the calling thread; the
    wait is 0 where ``/proc/thread-self/schedstat`` is missing."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            wait_ns = f.read().split()[1]
        return time.thread_time(), int(wait_ns) / 1e9
    except (OSError, ValueError, IndexError):
        return time.thread_time(), 0.0


@dataclass
class AutoChoice:
    """Collects (cpu, wall) per batch and decides once."""

    workers: int
    cores: int
    measure: int = 0
    """Batches to time after the probe (default: 2 per worker, at least 4)."""
    probe_ratio: float | None = None
    ratios: list[float] = field(default_factory=list)
    seconds: float = 0.0
    decided: str | None = None
    why: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.measure = self.measure or max(4, 2 * self.workers)

    def timed(self, probe: bool, cpu: float, wall: float) -> str | None:
        """Record one batch (``wall`` less the time spent waiting for a core); returns the
        decision when this batch completes the sample."""
        if self.decided is not None or wall <= 0:
            return None
        cpu = min(cpu, wall)
        with self._lock:
            if self.decided is not None:
                return None
            if probe:
                self.probe_ratio = cpu / wall
                return None
            self.ratios.append(cpu / wall)
            self.seconds += wall
            if self.workers == 1:
                return self._decide("thread", "one worker: nothing for processes to run in "
                                    "parallel, and threads copy nothing")
            if len(self.ratios) < self.measure or self.seconds < MIN_SECONDS:
                return None
            return self._decide(*self._judge())

    def _judge(self) -> tuple[str, str]:
        share = statistics.median(self.ratios)
        figures = (f"each thread got {share:.2f} CPU-s per second not waiting for a core, "
                   f"with {self.workers} workers on {self.cores} cores")
        if share < GIL_BOUND:
            return "process", f"{figures}: the workers wait for the GIL (Python per sample)"
        return "thread", f"{figures}: the work releases the GIL, threads scale"

    def _decide(self, kind: str, why: str) -> str:
        self.decided, self.why = kind, why
        return kind

    def report(self) -> dict[str, Any]:
        """What ``loader.stats["auto"]`` shows."""
        return {"chosen": self.decided, "why": self.why, "probe_cpu_per_wall": self.probe_ratio,
                "cpu_per_wall": [round(r, 3) for r in self.ratios]}
