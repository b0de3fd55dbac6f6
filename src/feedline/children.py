"""CPU time of the live child processes a fetch waits on (a leaf module: stdlib only).

A dataset may decode in processes it keeps: a ``ProcessPoolExecutor`` made once
and mapped over each batch, a ``subprocess.Popen`` decoder streaming through
pipes (an ``ffmpeg`` or ``sox`` kept running). The fetch's own thread is then
blocked on a pipe while its child burns CPU, so the fetch's thread CPU calls it
I/O. A child that ended and was waited for is in ``os.times()`` (see
``_torch_hooks.make_fetch``); a live one only in ``/proc``. :class:`LiveChildren`
reads the CPU of this process's live children (and of their waited-for children)
around a fetch, and :class:`SinceLast` hands their CPU to one stage span after another.
A leaf module so that a feedline.Loader process worker, whose ``decode`` may keep its
own decoder processes, reads its children where they are (observe cannot run there).
Linux only; elsewhere every delta is 0.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Collection

TICK = 1.0 / (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)

RESCAN_S = 1.0
"""Children are listed on the first :data:`RESCAN_FIRST` fetches (a pool or decoder the
dataset starts at its first item or in ``worker_init_fn`` is found at once) and then at
most once every this many seconds: listing reads one ``/proc`` file per thread of the
process (0.1-0.5 ms), reading the CPU of the children found one file each."""
RESCAN_FIRST = 4


def child_pids(pid: int | str = "self", tids: list[str] | None = None) -> list[int]:
    """The child processes of ``pid`` (this process by default), from
    ``/proc/<pid>/task/<tid>/children`` for each of its threads ``tids`` (listed when None)."""
    if tids is None:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return []
    out: list[int] = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                out.extend(int(c) for c in fh.read().split())
        except (OSError, ValueError):
            continue
    return out


def process_cpu(pid: int) -> float | None:
    """CPU seconds of process ``pid`` and of its waited-for children, or None (gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
        fields = raw[raw.rindex(b")") + 2:].split()
        # after the name: state(3) ... utime(14) stime(15) cutime(16) cstime(17)
        return sum(int(f) for f in fields[11:15]) * TICK
    except (OSError, ValueError, IndexError):
        return None


class LiveChildren:
    """CPU seconds this process's live children spend between :meth:`start` and :meth:`stop`.

    Args:
        skip: pids not to count (the loader's own worker processes: their fetches are
            timed in them).
    """

    def __init__(self, skip: Callable[[], Collection[int]] = frozenset) -> None:
        self._skip = skip
        self._pids: list[int] = []
        self._calls = 0
        self._scanned = float("-inf")

    def start(self) -> dict[int, float]:
        """The children's CPU now (children are listed again now and then)."""
        n, self._calls = self._calls, self._calls + 1
        now = time.monotonic()
        if n < RESCAN_FIRST or now - self._scanned >= RESCAN_S:
            self._scanned = now
            skip = self._skip()
            self._pids = [p for p in child_pids() if p not in skip]
        out: dict[int, float] = {}
        for pid in self._pids:
            cpu = process_cpu(pid)
            if cpu is not None:
                out[pid] = cpu
        return out

    def stop(self, before: dict[int, float]) -> tuple[float, int]:
        """CPU seconds the children in ``before`` used since, and how many of them ran (a
        pool of 2 decoding one batch: 2 processes on the CPU at once); one that ended counts
        nothing (its CPU, once waited for, is in ``os.times()``)."""
        total, ran = 0.0, 0
        for pid, cpu0 in before.items():
            cpu = process_cpu(pid)
            if cpu is not None and cpu > cpu0:
                total += cpu - cpu0
                ran += 1
        return total, ran


KEPT_STAGES = ("read", "decode", "transform")
"""A feedline.Loader worker's stages that may wait on a decoder process it keeps."""


class SinceLast:
    """CPU seconds this process's live children (those ``skip`` does not name) used since
    the previous call: a decoder a worker keeps (a process pool, a pipe) is on the CPU
    while the worker waits for it, which the worker's thread CPU calls blocked time. Each
    second of theirs goes to one call (the next stage span to end), so the spans' sum is
    their CPU over the run; the first call only takes the baseline (0). Thread-safe."""

    def __init__(self, skip: Callable[[], Collection[int]] = frozenset) -> None:
        self._kids = LiveChildren(skip=skip)
        self._at: dict[int, float] | None = None
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            now = self._kids.start()
            before, self._at = self._at, now
        if before is None:
            return 0.0
        return sum(max(0.0, cpu - before.get(pid, cpu)) for pid, cpu in now.items())
