"""The scheduler: which batches are wanted, and the ones prepared ahead.

Every job carries the *run* it was submitted for: a pass over an epoch, or the
first batches of the next pass prepared while the current one ends. A worker
drops a job whose run is no longer wanted (the pass was abandoned by
``set_epoch``, ``load_state_dict`` or ``close``), so cancellation is a change
of the current run id, never a signal to a worker. The scheduler is the only
owner of these ids and of the batches prepared ahead; the loader asks it, and
the runtime's workers consult :meth:`Scheduler.wanted`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from feedline.pipeline.handoff import all_done
from feedline.pipeline.jobs import Job

Submit = Callable[[Job], "Future[Any]"]
InFlight = list[tuple[Job, "Future[Any]"]]


@dataclass
class _Ahead:
    """Batches of ``epoch`` submitted (as run ``run``) before its pass began, in order."""

    epoch: int
    run: int
    jobs: InFlight


class Scheduler:
    """Run ids, the batches prepared ahead, and cancellation of one loader."""

    def __init__(self) -> None:
        self._runs = itertools.count(1)
        self.current = 0
        """The run of the pass being consumed (``-1`` once closed)."""
        self._ahead: _Ahead | None = None
        self._ahead_run: int | None = None

    def wanted(self, run: int) -> bool:
        """Whether a job of ``run`` is still wanted: the current pass or the batches ahead."""
        return run == self.current or run == self._ahead_run

    def abandon(self) -> None:
        """Abandon the current pass (its queued and running jobs are dropped)."""
        if self.current >= 0:
            self.current = next(self._runs)

    def begin(self, epoch: int, todo: Sequence[int]) -> tuple[int, InFlight, Sequence[int]]:
        """Start a pass over batches ``todo`` of ``epoch``: (run, jobs already in flight
        for it, batches still to submit). Batches prepared ahead are adopted when they are
        exactly the first of ``todo``; otherwise they are dropped."""
        ahead = self._ahead
        if ahead is not None and ahead.epoch == epoch and (
                [job.batch_id for job, _ in ahead.jobs] == list(todo[:len(ahead.jobs)])):
            self._ahead = None  # the ahead run stays wanted: it is the current one now
            self.current = ahead.run
            return ahead.run, ahead.jobs, todo[len(ahead.jobs):]
        self.drop_ahead()
        self.current = next(self._runs)
        return self.current, [], todo

    def prepare_ahead(self, epoch: int, room: int, count: int,
                      make_job: Callable[[int, int], Job], submit: Submit) -> None:
        """Submit batches ``0 .. min(room, count)-1`` of ``epoch`` ahead of its pass
        (``make_job(batch_id, run)``); they are used only if the next pass adopts them."""
        if self.current < 0:
            return
        ahead = self._ahead
        if ahead is None or ahead.epoch != epoch:
            self.drop_ahead()
            ahead = self._ahead = _Ahead(epoch, next(self._runs), [])
            self._ahead_run = ahead.run  # before any of its jobs can start
        while len(ahead.jobs) < min(room, count):
            job = make_job(len(ahead.jobs), ahead.run)
            ahead.jobs.append((job, submit(job)))

    def first_ahead(self) -> tuple[Job, Future[Any]] | None:
        """The first batch prepared ahead for the next pass (None: none)."""
        ahead = self._ahead
        return ahead.jobs[0] if ahead is not None and ahead.jobs else None

    def keep_ahead_for(self, epoch: int) -> None:
        """Drop the batches prepared ahead unless they are for ``epoch``."""
        if self._ahead is not None and self._ahead.epoch != epoch:
            self.drop_ahead()

    def drop_ahead(self) -> None:
        """Cancel the batches prepared ahead (they are never seen)."""
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return
        if self._ahead_run == ahead.run:
            self._ahead_run = None
        for _, future in ahead.jobs:
            future.cancel()

    def wait_ahead(self, timeout: float | None) -> bool:
        """Wait for the batches prepared ahead; True when none is still being prepared."""
        ahead = self._ahead
        if ahead is None:
            return True
        return all_done([future for _, future in ahead.jobs], timeout)

    def close(self) -> None:
        """No run is wanted any more."""
        self.current = -1
        self._ahead = None
        self._ahead_run = None
