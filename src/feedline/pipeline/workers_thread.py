"""Thread workers: the default pool (no pickling, no shared memory).

Decoders that release the GIL (simplejpeg, numpy copies, file reads) run in
parallel across threads. Threads are started once and persist across epochs.
Each worker is named ``feedline-worker_<n>`` (the name in errors and spans).

A thread cannot be killed, so a worker stuck in a decode or transform that
never returns cannot be stopped. :meth:`ThreadWorkers.close` waits for running
batches at most ``join_timeout`` seconds, then leaves the stuck threads behind
with a warning naming them; they are daemon threads, so they do not keep the
interpreter from exiting.
"""

from __future__ import annotations

import queue
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from feedline.errors import ResourceError
from feedline.pipeline.handoff import Handoff
from feedline.pipeline.jobs import Job
from feedline.pipeline.split import Part

Task = Job | Part
"""A whole batch, or one part of a batch split among the workers (:mod:`.split`)."""
RunJob = Callable[[Task, str], Any]

def nproc_limit() -> str:
    """The user's process limit, said as a user sets it (threads count against it too)."""
    import resource

    soft = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    shown = "unlimited" if soft == resource.RLIM_INFINITY else str(soft)
    return f"ulimit -u, RLIMIT_NPROC, is {shown}: every process and thread of this user counts"


JOIN_TIMEOUT = 30.0
"""Seconds ``close()`` waits for running batches when the loader has no ``timeout``."""


class ThreadWorkers:
    """A persistent pool of ``count`` daemon threads running ``run(job, worker_name)``.

    Args:
        count: number of threads (>= 1).
        run: the batch function; its return value or exception lands in the future.
        join_timeout: most seconds :meth:`close` waits for running batches
            (``None``: :data:`JOIN_TIMEOUT`).
        on_start: called first in each worker thread (e.g. pin it to a NUMA node's CPUs).
    """

    kind = "thread"

    def __init__(self, count: int, run: RunJob, join_timeout: float | None = None,
                 on_start: Callable[[], None] | None = None) -> None:
        self._run = run
        self._on_start = on_start
        self._join_timeout = JOIN_TIMEOUT if join_timeout is None else join_timeout
        self._jobs: queue.SimpleQueue[tuple[Future[Any], Task] | None] = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._serve, name=f"feedline-worker_{i}",
                                          daemon=True) for i in range(count)]
        for i, thread in enumerate(self._threads):
            try:
                thread.start()
            except RuntimeError as exc:  # "can't start new thread": RLIMIT_NPROC or memory
                for _ in range(i):
                    self._jobs.put(None)  # the started ones end
                raise ResourceError(
                    f"cannot start worker thread {i + 1} of {count}: {exc} ({nproc_limit()})",
                    field="workers", fix="lower workers=, or raise the process limit (ulimit -u)",
                ) from exc

    def submit(self, job: Task) -> Future[Any]:
        """Queue ``job``; the future holds the batch or the worker's exception."""
        future: Future[Any] = Handoff()  # the consumer waits on it without a Python-level lock
        self._jobs.put((future, job))
        return future

    def _serve(self) -> None:
        name = threading.current_thread().name
        if self._on_start is not None:
            self._on_start()
        while True:
            item = self._jobs.get()
            if item is None:
                return
            future, job = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = self._run(job, name)
            except BaseException as exc:  # delivered to the consumer, which re-raises it
                future.set_exception(exc)
            else:
                future.set_result(result)
                # the batch is the consumer's now: a reference kept here would hold its
                # slot (on CPU a lent slot comes back only once every reference is gone)
                # until this worker finished its next batch: one extra slot per worker
                del result
            del item, future, job  # hold no batch while waiting for the next job

    def close(self) -> None:
        """Cancel queued jobs, then wait for running ones (at most ``join_timeout``)."""
        while True:
            try:
                item = self._jobs.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item[0].cancel()
        for _ in self._threads:
            self._jobs.put(None)
        deadline = time.monotonic() + self._join_timeout
        # a loader dropped without close() is closed by its finalizer, which the garbage
        # collector may run on one of these very threads: that one ends after it returns
        others = [t for t in self._threads if t is not threading.current_thread()]
        for thread in others:
            thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in others if t.is_alive()]
        if stuck:
            warnings.warn(
                f"{', '.join(stuck)} still running a batch {self._join_timeout:g}s after close(); "
                "left behind (a decode or transform that never returns?)",
                RuntimeWarning, stacklevel=2,
            )
