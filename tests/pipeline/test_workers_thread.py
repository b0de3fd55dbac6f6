"""Thread workers hand each batch over and keep no reference to it."""

from __future__ import annotations

import threading
import weakref
from typing import Any

import pytest

from feedline.pipeline.jobs import Job
from feedline.pipeline.workers_thread import ThreadWorkers


class Batch:
    """Stands for a delivered batch (on CPU it holds a lent slot until it is freed)."""


@pytest.mark.timeout(30)
def test_a_delivered_batch_is_freed_while_the_worker_runs_its_next_job() -> None:
    started, go = threading.Event(), threading.Event()

    def run(job: Job, worker: str) -> Any:
        if job.batch_id == 1:
            started.set()
            assert go.wait(20)
        return Batch()

    workers = ThreadWorkers(1, run)
    try:
        first = workers.submit(Job(0, 0, [0], []))
        ref = weakref.ref(first.result(timeout=20))
        del first
        second = workers.submit(Job(0, 1, [1], []))
        assert started.wait(20)  # the worker is inside its next job now
        # a reference left in the worker would keep the first batch (and its slot) alive
        # until this job ends: one extra slot per worker
        assert ref() is None
        go.set()
        assert isinstance(second.result(timeout=20), Batch)
    finally:
        go.set()
        workers.close()


def test_close_called_on_a_worker_thread_does_not_join_itself() -> None:
    """A loader dropped without close() is closed by its finalizer, which the garbage
    collector may run on one of the loader's own worker threads."""
    workers = ThreadWorkers(2, lambda job, worker: workers.close() or worker)
    name = workers.submit(Job(0, 0, [0], [])).result(timeout=20)
    assert name.startswith("feedline-worker_")
    for thread in workers._threads:
        thread.join(20)
        assert not thread.is_alive()
