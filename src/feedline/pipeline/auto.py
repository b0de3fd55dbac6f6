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

On a busy host the share is a weak signal (a thread holding the GIL loses its
core to other work while the others wait for it), so a second measure decides
the clear cases: while the batches are timed, a :class:`GilProbe` thread sleeps
1 ms again and again and adds up how long each wake waited for the GIL (less
its own wait for a core). Workers running Python hold the GIL nearly all the
time: the probe waits a whole switch interval (5 ms) or more on every wake, most
of its time; at or above ``GIL_HELD[1]`` the loader moves to processes. Workers
in code that releases the GIL leave it free: the probe gets it at once. That
alone does not make threads scale: many short operations that each release the
GIL (numpy on small images, a few microseconds each) hand it back and forth at
every call, and two such threads do less than one. So at or below
``GIL_HELD[0]`` the loader keeps threads only when the share says they run
(at least :data:`GIL_BOUND`), the host is busy (the threads waited for a core
:data:`BUSY` of the time or more: the share is blurred, the probe is not), or
there are more workers than cores (chosen to wait on storage: a low share is
I/O, which more threads serve); otherwise the share decides.

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

GIL_BOUND = 0.8
"""A median CPU share (of the time not waiting for a core) below this: GIL-bound. Processes
would use about ``1 / share`` times the CPU the threads get: 1.25x here, more than what
their copies through shared memory cost."""

BUSY = 0.25
"""A median share of a timed batch's wall time spent waiting for a core at or above this:
the host is busy, and a probe that found the GIL free decides for threads."""


GIL_HELD = (0.3, 0.6)
"""Shares of its time a :class:`GilProbe` waited for the GIL: at or below the first, the GIL
is free (threads); at or above the second, the workers hold it (processes)."""

MIN_PROBE_SECONDS = 0.1
"""A GIL probe that ran less than this says nothing: the share decides."""

MIN_SECONDS = 0.6
"""Measure batches after the probe until at least this much wall time is covered (short
batches are below the scheduler's accounting grain, and the probe needs
:data:`MIN_PROBE_SECONDS`)..."""

EPOCH_SHARE = 4
"""...or until a quarter (``1 / EPOCH_SHARE``) of the epoch's batches were timed: a short
epoch still decides within its first pass instead of never."""

SHORT_PASS_SECONDS = 0.5
"""A pass (epoch) that the timed batches project to take less than this on the threads
stays on them: the processes' start (0.2-0.4 s with the forkserver running, seconds
when it imports torch first) and their first batches would not pay for themselves within
it, and a test's or a tiny dataset's loader starts no processes. Where the epoch's length
is unknown, the rule does not apply."""

CLEAR_PROBE_SECONDS = 0.2
"""...unless the evidence is clear sooner: once the first ``measure`` batches are timed and
the probe has run this long (not waiting for a core), a probe reading outside
``GIL_HELD``'s middle that the share agrees with (:meth:`AutoChoice.clear`) decides at
once. On a one-epoch run every batch decided earlier runs on the better kind."""


def thread_clock() -> tuple[float, float]:
    """(CPU seconds, seconds runnable but waiting for a core) of the calling thread; the
    wait is 0 where ``/proc/thread-self/schedstat`` is missing."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            wait_ns = f.read().split()[1]
        return time.thread_time(), int(wait_ns) / 1e9
    except (OSError, ValueError, IndexError):
        return time.thread_time(), 0.0


@dataclass(frozen=True)
class GilReading:
    """What a :class:`GilProbe` saw: its wakes, the seconds it ran, of those the seconds it
    waited for a core (``runq``) and the seconds it waited for the GIL."""

    wakes: int
    elapsed: float
    waited: float
    runq: float = 0.0

    @property
    def fraction(self) -> float | None:
        """The share of the probe's time not spent waiting for a core that it spent waiting
        for the GIL (``None`` when that time is under :data:`MIN_PROBE_SECONDS`: a very short
        measurement says nothing). On a busy host a thread waiting for the GIL also waits
        for a core at every hand-over; that time counts for neither."""
        own = self.elapsed - self.runq
        if own < MIN_PROBE_SECONDS or self.wakes < 3:
            return None
        return min(1.0, max(0.0, self.waited / own))


class GilProbe:
    """A thread that sleeps ``interval`` again and again and adds up the time it waited for
    the GIL: each cycle's wall time less the sleep, its own CPU time, its wait for a core,
    and the timer's ordinary slack (``slack``). Sleeping and every system call give up
    the GIL, going on needs it: with the GIL free the probe is late by microseconds; with
    threads running Python it waits for a switch interval (5 ms) or longer each time. The
    cycles are contiguous, so every wait is counted. It stops by itself after
    ``max_seconds`` (a loader whose measurement never completes, say a dataset of fewer
    batches, does not keep a thread waking forever)."""

    def __init__(self, interval: float = 0.001, slack: float = 0.0002, max_seconds: float = 5.0) -> None:
        self.interval = interval
        self.slack = slack
        self.max_seconds = max_seconds
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._wakes, self._elapsed, self._waited, self._runq = 0, 0.0, 0.0, 0.0

    def start(self) -> None:
        """Start probing (a daemon thread; :meth:`stop` ends it)."""
        self._thread = threading.Thread(target=self._run, name="feedline-gil-probe", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        began = time.perf_counter()
        t0, (c0, q0) = began, thread_clock()
        while not self._stop.is_set() and t0 - began < self.max_seconds:
            time.sleep(self.interval)
            t1, (c1, q1) = time.perf_counter(), thread_clock()
            cycle, runq = t1 - t0, q1 - q0
            self._wakes += 1
            self._elapsed += cycle
            self._runq += runq
            self._waited += max(0.0, cycle - self.interval - (c1 - c0) - runq - self.slack)
            t0, c0, q0 = t1, c1, q1

    def peek(self) -> GilReading:
        """What the probe has seen so far, while it goes on."""
        return GilReading(self._wakes, self._elapsed, self._waited, self._runq)

    def restart_count(self) -> None:
        """Forget what was seen so far (start-up, before the batches are timed)."""
        self._wakes, self._elapsed, self._waited, self._runq = 0, 0.0, 0.0, 0.0

    def stop(self) -> GilReading:
        """Stop probing; what was seen (idempotent)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(1.0)
        return GilReading(self._wakes, self._elapsed, self._waited, self._runq)


@dataclass
class AutoChoice:
    """Collects (cpu, wall) per batch and decides once."""

    workers: int
    cores: int
    measure: int = 0
    """Batches to time after the probe (default: 2 per worker, at least 4)."""
    epoch_batches: int = 0
    """Batches in an epoch (0: unknown), for the :data:`EPOCH_SHARE` limit."""
    probe_ratio: float | None = None
    ratios: list[float] = field(default_factory=list)
    queued: list[float] = field(default_factory=list)
    """Per timed batch: the share of its wall time the thread waited for a core."""
    seconds: float = 0.0
    decided: str | None = None
    why: str = ""
    gil: GilProbe | None = None
    """The GIL probe running while batches are timed (:meth:`start_probe`)."""
    reading: GilReading | None = None
    """What the probe saw, once stopped."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.measure = self.measure or max(4, 2 * self.workers)

    def start_probe(self) -> None:
        """Start the :class:`GilProbe` (stopped by the decision or :meth:`stop_probe`)."""
        self.gil = GilProbe()
        self.gil.start()

    def stop_probe(self) -> GilReading | None:
        """Stop the probe if it runs; its reading."""
        if self.gil is not None and self.reading is None:
            self.reading = self.gil.stop()
        return self.reading

    def timed(self, probe: bool, cpu: float, wall: float, runq: float = 0.0) -> str | None:
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
                if self.gil is not None:
                    self.gil.restart_count()
                return None
            self.ratios.append(cpu / wall)
            self.queued.append(runq / (wall + runq))
            self.seconds += wall
            if self.workers == 1:
                return self._decide("thread", "one worker: nothing for processes to run in "
                                    "parallel, and threads copy nothing")
            if len(self.ratios) < self.measure:
                return None
            enough = max(self.measure, self.epoch_batches // EPOCH_SHARE)
            if self.seconds < MIN_SECONDS and len(self.ratios) < enough and not self.clear():
                return None
            return self._decide(*self._choose(self.stop_probe()))

    def clear(self) -> bool:
        """Whether the probe, having run :data:`CLEAR_PROBE_SECONDS`, already reads the GIL
        as held (processes) or free while the threads run (threads): the rest of the
        measurement would not change the choice."""
        if self.gil is None or self.reading is not None:
            return False
        now = self.gil.peek()
        held = now.fraction
        if held is None or now.elapsed - now.runq < CLEAR_PROBE_SECONDS:
            return False
        return held >= GIL_HELD[1] or (held <= GIL_HELD[0] and statistics.median(self.ratios) >= GIL_BOUND)

    def _choose(self, reading: GilReading | None) -> tuple[str, str]:
        """:meth:`_judge`, except that a short pass (:data:`SHORT_PASS_SECONDS`) stays on
        threads."""
        kind, why = self._judge(reading)
        if kind == "process" and self.epoch_batches and self.ratios:
            projected = self.seconds / len(self.ratios) * self.epoch_batches / self.workers
            if projected < SHORT_PASS_SECONDS:
                return "thread", (f"{why}; but an epoch takes about {projected:.2f} s on the threads, "
                                  "too short for processes to pay for their start")
        return kind, why

    def _judge(self, reading: GilReading | None) -> tuple[str, str]:
        share = statistics.median(self.ratios)
        queued = statistics.median(self.queued) if self.queued else 0.0
        figures = (f"each thread got {share:.2f} CPU-s per second not waiting for a core, "
                   f"with {self.workers} workers on {self.cores} cores")
        held = reading.fraction if reading is not None else None
        if held is not None:
            probed = f"a probe thread spent {held:.0%} of its time (not waiting for a core) waiting for the GIL"
            if held >= GIL_HELD[1]:
                return "process", f"{probed} and {figures}: the workers hold the GIL (Python per sample)"
            if held <= GIL_HELD[0] and (share >= GIL_BOUND or queued >= BUSY
                                        or self.workers > self.cores):
                host = "" if share >= GIL_BOUND else (
                    f", on a busy host (the threads waited for a core {queued:.0%} of the time)"
                    if queued >= BUSY else ", more workers than cores (for waits on storage)")
                return "thread", f"{probed} and {figures}{host}: the work releases the GIL, threads scale"
            if held <= GIL_HELD[0]:
                return "process", (
                    f"{probed}, but {figures} on a quiet host: the threads take turns on it "
                    "(many short calls that each release and take it back, e.g. numpy on "
                    "small arrays), processes run in parallel")
            figures = f"{probed} (in between) and {figures}"
        if share < GIL_BOUND:
            return "process", f"{figures}: the workers wait for the GIL (Python per sample)"
        return "thread", f"{figures}: the work releases the GIL, threads scale"

    def _decide(self, kind: str, why: str) -> str:
        self.stop_probe()
        self.decided, self.why = kind, why
        return kind

    def report(self) -> dict[str, Any]:
        """What ``loader.stats["auto"]`` shows."""
        reading = self.reading
        return {"chosen": self.decided, "why": self.why, "probe_cpu_per_wall": self.probe_ratio,
                "cpu_per_wall": [round(r, 3) for r in self.ratios],
                "runq_share": [round(r, 3) for r in self.queued],
                "gil_held": None if reading is None or reading.fraction is None else round(reading.fraction, 3),
                "gil_probe_wakes": None if reading is None else reading.wakes,
                "gil_probe_s": None if reading is None else round(reading.elapsed, 3)}
