"""A batch split across thread workers: parts of its rows, one slot, one delivery.

A worker that fills a whole batch leaves the others idle whenever that batch is
the one the consumer waits for: the last batch of an epoch runs on one worker,
and a worker that finished a later batch first waits for a slot while the
earlier one is still being filled. On a plan with no per-sample field (rows read,
images decoded into rows, labels gathered: :func:`~feedline.pipeline.plan.fill_rows`)
the rows of one batch are independent, so thread workers fill them in *parts*:
each part is a range of rows of the same slot, queued in order, so the workers
fill the batch the consumer needs next together and hand it over as soon as it
is whole. The slot is taken by the first part that starts and sent by the last
part to finish (:class:`Split`); the consumer sees one future per batch, as
before, with the same batch in it.

How many parts: one part costs a queue hand-over and a call (about 15 us of
CPU), so a batch is split only when its measured cost
(:func:`part_rows`: the probe's CPU time per sample, times the batch size) is
many times that; a batch of cheap rows (W2/W3: 256 raw rows in about a
millisecond) stays whole.

What stays the same: images of another size are kept by the part that decoded
them and given as the field's list once the batch is whole, as an unsplit batch
gives them; a part whose rows fail (a damaged sample) makes the *whole* batch go on
the per-sample path once every part is done, in the worker that finishes last,
exactly as an unsplit batch does (same skips, refills and errors); the position,
resume and counters only see delivered batches. Process workers fill whole batches (each
batch travels through one arena slot to the parent).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from feedline.errors import WorkerDied
from feedline.pipeline.handoff import Handoff
from feedline.pipeline.jobs import Job
from feedline.pipeline.plan import Filled

PART_S = 0.01
"""CPU seconds a part should take at least. A part costs a queue hand-over, a call and a
lock: 15 us of CPU measured (4,000 16x24 JPEGs, batch 64, 2 threads: 33.8 us a sample in
parts of 16 vs 32.9 whole), so at 10 ms it is under 0.2 % of the work. W1 (256x256 JPEGs,
0.65-0.75 ms each, batch 64) gets 4 parts of 16 rows."""

MAX_PARTS_PER_WORKER = 2
"""At most this many parts per worker in one batch. Workers take parts in order and never
wait at a batch's end (the next batch's parts are queued behind), so more parts only add
hand-overs; and the probe's cost reads higher on a loaded host (W1: 1.0-1.6 ms a JPEG at
load 12 instead of 0.75), which without this cap gave 6-8 parts instead of 4."""


def part_rows(cpu_per_sample: float, batch_size: int, workers: int) -> int:
    """Rows per part for batches of ``batch_size`` samples costing ``cpu_per_sample`` CPU
    seconds each (measured on the probe), on ``workers`` thread workers; ``0``: do not split
    (one worker, or a batch too cheap for a part to be worth its hand-over)."""
    if workers < 2 or batch_size < 2 or cpu_per_sample <= 0:
        return 0
    parts = min(int(cpu_per_sample * batch_size / PART_S), MAX_PARTS_PER_WORKER * workers,
                batch_size)
    if parts < 2:
        return 0
    return math.ceil(batch_size / parts)


@dataclass(eq=False)
class Part:
    """Rows ``lo:hi`` of ``split``'s batch: what a thread worker runs for one part."""

    split: Split
    lo: int
    hi: int

    @property
    def run(self) -> int:
        return self.split.job.run

    @property
    def probe(self) -> bool:
        return False


@dataclass(eq=False)
class Split:
    """One batch being filled in parts (see the module).

    ``acquire()`` gives a slot, ``fill(part, slot, worker)`` fills the part's rows
    (``None``: they failed), ``finish(job, slot, filled, failed, worker)`` turns the filled slot
    into what the batch's future holds (redoing the whole batch per sample when ``failed``;
    it owns the slot from then on), ``release(slot)`` gives back the slot of a batch whose
    part raised. Those are the runtime's; this class only counts parts.
    """

    job: Job
    rows: int
    acquire: Callable[[], Any]
    fill: Callable[[Part, Any, str], Any]
    finish: Callable[[Job, Any, Filled, bool, str], Any]
    release: Callable[[Any], None]
    future: Future[Any] = field(default_factory=Handoff)
    """The batch's: the consumer waits on it as on an unsplit batch's."""
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _slot: Any = None
    _keys: dict[int, list[str]] = field(default_factory=dict)
    _misfits: dict[str, dict[int, Any]] = field(default_factory=dict)
    _failed: bool = False
    _error: BaseException | None = None
    _left: int = 0
    _started: bool = False
    _dropped: bool = False

    def parts(self) -> list[Part]:
        """The batch's parts, in row order (to be queued in that order)."""
        n = len(self.job.indices)
        out = [Part(self, lo, min(lo + self.rows, n)) for lo in range(0, n, self.rows)]
        self._left = len(out)
        return out

    def run_part(self, part: Part, worker: str) -> None:
        """Fill ``part`` (in ``worker``); the last part to end completes the batch's future."""
        try:
            slot = self._slot_for_part()
            if slot is not None:
                filled = self.fill(part, slot, worker)
                with self._lock:
                    if filled is None:
                        self._failed = True
                    else:
                        self._keys[part.lo] = filled.keys
                        for name, rows in filled.misfits.items():
                            self._misfits.setdefault(name, {}).update(rows)
        except BaseException as exc:  # the batch's error, raised to the consumer
            with self._lock:
                if self._error is None:
                    self._error = exc
        finally:
            self.part_ended(worker)

    def _slot_for_part(self) -> Any:
        """The batch's slot (taken by the first part to start); None: nothing to fill (the
        batch was cancelled before it started, or another part failed to get a slot)."""
        with self._lock:
            if not self._started:
                self._started = True
                if not self.future.set_running_or_notify_cancel():
                    self._dropped = True
                    return None
                self._slot = self.acquire()  # may wait for the budget: the others wait here
            if self._dropped or self._error is not None or self._failed:
                return None  # (failed: the whole batch is redone per sample anyway)
            return self._slot

    def part_ended(self, worker: str = "", *, cancelled: bool = False) -> None:
        """Count one part as ended (run, or ``cancelled`` before it ran by the pool's
        close); after the last one, complete the batch's future (in ``worker``, the last
        part's)."""
        with self._lock:
            if cancelled and self._error is None:
                self._error = WorkerDied("thread workers closed", stage="close")
            self._left -= 1
            if self._left > 0:
                return
            slot, self._slot = self._slot, None
            error, dropped, failed = self._error, self._dropped, self._failed
            keys = [k for lo in sorted(self._keys) for k in self._keys[lo]]
            misfits = self._misfits
        if dropped:
            return  # cancelled before any part started: the future says so already
        if not self._started:  # every part was cancelled by the pool's close
            if not self.future.cancel():
                self.future.set_exception(WorkerDied("thread workers closed", stage="close"))
            return
        if error is not None or slot is None:
            if slot is not None:
                self.release(slot)
            self.future.set_exception(error or WorkerDied("a part of the batch did not run",
                                                          stage="close"))
            return
        try:
            result = self.finish(self.job, slot, Filled(keys, misfits=misfits), failed,
                                 worker)  # owns the slot now
        except BaseException as exc:
            self.future.set_exception(exc)
        else:
            self.future.set_result(result)


def cancel_hook(split: Split) -> Callable[[Future[Any]], None]:
    """A done-callback for the pool's future of one of ``split``'s parts: a part cancelled
    before it ran (the pool closing) still ends."""

    def ended(future: Future[Any]) -> None:
        if future.cancelled():
            split.part_ended(cancelled=True)

    return ended
