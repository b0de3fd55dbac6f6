"""One pass over the remaining batches of an epoch: the consumer side.

Keeps up to ``window`` jobs in flight, hands out batches in order (or, with
``in_order=False``, whichever is ready first), waits at most ``timeout`` per
batch, makes the consumer's stream wait on the copy (``engine.accept``) and
reports each delivery so the loader's position only counts batches the user
actually received. Once every job of the pass is submitted, the room left in
the window goes to ``ahead`` (the loader prepares the next epoch's first
batches there, so a new epoch does not start with an empty pipeline).

Before the layout is known only the probe (batch 0 of the plan, the ``gate``)
is in flight: nothing else is submitted until it has arrived, and waiting for
it obeys ``timeout`` like any batch. Each ``next()`` records how full the
window is (batches ready and waiting for the consumer) and how long the
consumer waited, in the runtime's :class:`~feedline.pipeline.gauges.Gauges`.
With a decode after delivery (``decode_on``), each delivery starts the next
batch's decode ahead (:meth:`~feedline.pipeline.device_decode.DeviceDecode.ahead`),
so it runs while the user computes.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from feedline import spans
from feedline.errors import ConfigError, LoaderTimeout, WorkerError
from feedline.pipeline._user_frames import short
from feedline.pipeline.handoff import first_done
from feedline.pipeline.jobs import Job
from feedline.pipeline.runtime import Ready, Runtime

STUCK_CHECK_S = 1.0
"""How often a consumer waiting for a batch asks whether a worker is stuck for good."""


class Pass:
    """The iterator returned by ``iter(loader)``."""

    def __init__(self, rt: Runtime, run: int, todo: Sequence[int], make_job: Callable[[int], Job],
                 delivered: Callable[[Ready], None], *, window: int,
                 in_order: bool, timeout: float | None,
                 inflight: list[tuple[Job, Future[Any]]] | None = None,
                 ahead: Callable[[int], None] | None = None,
                 gate: Future[Any] | None = None, owner: object = None) -> None:
        """``inflight``: jobs of this pass already submitted (prepared ahead), in order;
        ``ahead(room)``: called with the free room of the window once ``todo`` is empty;
        ``gate``: the probe, awaited before anything else is submitted;
        ``owner``: the loader, named to an installed :func:`feedline.spans.step_hook`."""
        self._owner = owner
        self._rt, self._run, self._make_job, self._delivered = rt, run, make_job, delivered
        self._todo, self._cursor = todo, 0  # a range for a whole epoch: no list of its batch ids
        self._inflight: deque[tuple[Job, Future[Any]]] = deque(inflight or ())
        self._window, self._in_order, self._timeout = window, in_order, timeout
        self._ahead = ahead
        self._gate = gate
        self.consumer: int | None = None
        """The thread that last asked for a batch (None before the first ``next()``)."""
        self.finished = False
        self.replaced = False
        """A newer ``iter()`` of the same loader took over the stream (set by the loader)."""

    def __iter__(self) -> Pass:
        return self

    def _fill(self) -> None:
        if self._gate is not None:
            return  # the layout is not known yet
        while self._cursor < len(self._todo) and len(self._inflight) < self._window:
            job = self._make_job(self._todo[self._cursor])
            self._cursor += 1
            self._inflight.append((job, self._rt.submit(job)))
        if self._cursor >= len(self._todo) and self._ahead is not None and self._rt.sched.current == self._run:
            self._ahead(self._window - len(self._inflight))

    def __next__(self) -> Any:
        hook = spans.step_hook()
        try:
            if hook is not None:  # a measuring tool times this step (feedline diagnose / watch)
                return hook(self._owner, self._next)
            return self._next()
        except WorkerError as err:  # its frames in the futures and pool are not the user's
            raise short(err) from err.__cause__

    def live_elsewhere(self) -> bool:
        """Whether another thread, still alive, is in the middle of this pass."""
        if self.finished or self.consumer is None or self.consumer == threading.get_ident():
            return False
        return any(t.ident == self.consumer for t in threading.enumerate())

    def _next(self) -> Any:
        self._rt.check_process()
        self.consumer = threading.get_ident()
        if self._rt.sched.current != self._run:
            self._abandon()
            self.finished = True
            if self.replaced:  # ending it quietly would end a zip(loader, loader) at once
                raise ConfigError(
                    "this iterator of the loader was replaced by a newer iter() of it, which goes "
                    "on with the epoch: a Loader is one stream of batches", field="loader",
                    fix="use the newest iterator only, or make a second Loader for a second stream "
                        "(zip(loader, loader), a mixup partner)")
            raise StopIteration
        if self._gate is not None:
            self._pass_gate()
        self._fill()
        if not self._inflight:
            self.finished = True
            raise StopIteration
        after = self._rt.opts.after_delivery
        if after is not None:
            after.before_next()
        t0 = time.perf_counter()
        ready_now = sum(f.done() for _, f in self._inflight)
        job, ready = self._take()
        batch = self._rt.engine.accept(ready.tree, ready.fence)
        t1 = time.perf_counter()
        self._rt.gauges.taken(ready_now, self._window, t1 - t0)
        if spans.active():
            spans.emit("wait", t0, t1, batch=job.batch_id, ready=ready_now,
                       window=self._window)
        if after is not None:  # decode on the device: its own span (the time the consumer
            batch = after(batch, job)  # waits for it), not a wait
            if spans.active():
                spans.emit(after.name, t1, time.perf_counter(), batch=job.batch_id)
        self._delivered(ready)
        self._fill()  # keep the window full while the user computes
        if after is not None and self._in_order:
            # the next batch decodes while the user computes: this pass's next, or after its
            # last the next pass's first (prepared ahead; used only if that pass adopts it)
            following = self._inflight[0] if self._inflight else self._rt.sched.first_ahead()
            if following is not None:
                after.owner = self._rt.owner
                after.ahead(*following)
        return batch

    def _pass_gate(self) -> None:
        """Wait for the probe (raising its error, or LoaderTimeout); then open the window."""
        gate = self._gate
        assert gate is not None
        probe = next((j for j, f in self._inflight if f is gate), None)
        self._wait([gate], probe or Job(self._run, 0, [], []))
        gate.result()
        self._gate = None
        self._window = self._rt.opts.window  # fitted to the budget by the probe's layout

    def _take(self) -> tuple[Job, Ready]:
        if self._in_order:
            job, fut = self._inflight[0]
            self._wait([fut], job)
        else:
            done = self._wait([f for _, f in self._inflight], self._inflight[0][0])
            job, fut = min((p for p in self._inflight if p[1] in done),
                           key=lambda p: p[0].batch_id)
        ready = fut.result()
        self._inflight.remove((job, fut))
        return job, ready

    def _wait(self, futures: list[Future[Any]], job: Job) -> set[Future[Any]]:
        """The first of ``futures`` done, within the timeout (else LoaderTimeout for
        ``job``); every :data:`STUCK_CHECK_S` of waiting the runtime is asked whether a
        worker will never deliver (its error is raised at once, timeout or not)."""
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            step = STUCK_CHECK_S if left is None else min(left, STUCK_CHECK_S)
            done = first_done(futures, step)  # no Python-level lock: see feedline.pipeline.handoff
            if done:
                return done
            stuck = self._rt.stuck()
            if stuck is not None:
                raise stuck
            if left is not None and left <= step:
                raise self._timed_out(job)

    def _timed_out(self, job: Job) -> LoaderTimeout:
        shard, key = self._rt.ctx.source.locate(job.indices[0]) if job.indices else (None, None)
        return LoaderTimeout(
            f"batch {job.batch_id} not ready after {self._timeout}s", stage="read+decode",
            shard=shard, key=key, batch=job.batch_id,
            fix="raise timeout=, or find the slow sample with feedline diagnose",
        )

    def _abandon(self) -> None:
        if self._rt.opts.after_delivery is not None:
            self._rt.opts.after_delivery.discard()
        for _, fut in self._inflight:
            fut.cancel()
        self._inflight.clear()
        self._todo, self._cursor = (), 0
