"""Thread workers: the default pool (no pickling, no shared memory).

Decoders that release the GIL (simplejpeg, numpy copies, file reads) run in
parallel across threads. Threads are started once and persist across epochs.
Each worker is named ``feedline-worker_<n>`` (the name in errors and spans).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from feedline.pipeline.jobs import Job

RunJob = Callable[[Job, str], Any]


class ThreadWorkers:
    """A persistent pool of ``count`` threads running ``run(job, worker_name)``.

    Args:
        count: number of threads (>= 1).
        run: the batch function; its return value or exception lands in the future.
    """

    kind = "thread"

    def __init__(self, count: int, run: RunJob) -> None:
        self._run = run
        self._executor = ThreadPoolExecutor(count, thread_name_prefix="feedline-worker")

    def submit(self, job: Job) -> Future[Any]:
        """Queue ``job``; the future holds the batch or the worker's exception."""
        return self._executor.submit(self._call, job)

    def _call(self, job: Job) -> Any:
        return self._run(job, threading.current_thread().name)

    def close(self) -> None:
        """Cancel queued jobs and join the threads (a job in progress finishes first)."""
        self._executor.shutdown(wait=True, cancel_futures=True)
