"""Futures the training thread can wait on without a Ctrl-C leaving a lock held.

A worker hands each batch over in a ``concurrent.futures.Future``, and the consumer
waited with ``concurrent.futures.wait``. Both take their locks with Python-level
``with condition:`` (``threading.Condition.__enter__`` and ``Event.wait`` are Python
code): a Ctrl-C raised there just after the lock was taken leaves it held (the ``with``
block never started), as round 13 found in our own conditions. Then the worker that
completes that future blocks for ever on its lock, or on the event of a waiter left
installed, or dies with "release unlocked lock", and the next batch never comes: 3 runs
of 5 hung (after 347, 5,711 and 15,172 SIGINTs of up to 20,000) in a loop that waits as
:class:`~feedline.pipeline.iteration.Pass` does; 0 of 3 x 20,000 with this module.

Here a :class:`Handoff` is a ``Future`` whose condition is an ``RLock`` (taken by
``with`` in C, as :mod:`._deferred_signals` explains), and :func:`first_done` /
:func:`all_done` wait on a ``SimpleQueue`` the futures ``put`` themselves into (C) when
they finish: no lock the training thread takes is ever left held by a signal, and a
waiter left installed by one costs a ``put`` into a queue nobody reads.
"""

from __future__ import annotations

import _thread
import queue
import threading
import time
from collections.abc import Iterable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from concurrent.futures._base import CANCELLED_AND_NOTIFIED, FINISHED
from typing import Any

_DONE = (CANCELLED_AND_NOTIFIED, FINISHED)  # what concurrent.futures.wait counts as done


class _Condition(_thread.RLock):  # type: ignore[misc]
    """An ``RLock`` that is also its own ``threading.Condition``: ``with`` enters it in C."""

    def __init__(self) -> None:
        super().__init__()
        self._cond = threading.Condition(self)

    def wait(self, timeout: float | None = None) -> bool:
        return self._cond.wait(timeout)

    def wait_for(self, predicate: Any, timeout: float | None = None) -> Any:
        return self._cond.wait_for(predicate, timeout)

    def notify(self, n: int = 1) -> None:
        self._cond.notify(n)

    def notify_all(self) -> None:
        self._cond.notify_all()


class Handoff(Future[Any]):
    """A ``concurrent.futures.Future`` whose lock is taken in C (see the module)."""

    def __init__(self) -> None:
        super().__init__()
        self._condition = _Condition()  # type: ignore[assignment]  # a Condition in all it is asked


class _Waiter:
    """What ``Future`` calls as it finishes (``add_result``...): a C-level ``put`` of itself."""

    __slots__ = ("add_cancelled", "add_exception", "add_result", "queue")

    def __init__(self) -> None:
        self.queue: queue.SimpleQueue[Future[Any]] = queue.SimpleQueue()
        self.add_result = self.add_exception = self.add_cancelled = self.queue.put


def first_done(futures: Iterable[Future[Any]], timeout: float | None) -> set[Future[Any]]:
    """The futures of ``futures`` already done, waiting up to ``timeout`` seconds for the
    first when none is (empty on timeout): ``concurrent.futures.wait(..., FIRST_COMPLETED)``
    without a Python-level lock (a plain ``Future`` among them: that wait)."""
    futures = list(futures)
    done = {f for f in futures if f._state in _DONE}
    if done or timeout == 0:
        return done
    if not all(type(f) is Handoff for f in futures):
        return set(wait(futures, timeout, FIRST_COMPLETED).done)
    waiter = _Waiter()
    for f in futures:
        with f._condition:  # C: a Handoff's condition is an RLock
            f._waiters.append(waiter)  # type: ignore[arg-type]  # the three calls a waiter gets
    try:
        done = {f for f in futures if f._state in _DONE}  # one done before its waiter came put nothing
        if not done:
            try:
                waiter.queue.get(timeout=timeout)
            except queue.Empty:
                pass
            done = {f for f in futures if f._state in _DONE}
    finally:
        for f in futures:
            with f._condition:
                try:
                    f._waiters.remove(waiter)  # type: ignore[arg-type]
                except ValueError:
                    pass
    return done


def all_done(futures: Iterable[Future[Any]], timeout: float | None) -> bool:
    """Wait up to ``timeout`` seconds until every future is done; whether they all are."""
    pending = list(futures)
    deadline = None if timeout is None else time.monotonic() + timeout
    while pending:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        done = first_done(pending, left)
        if not done:
            return False
        pending = [f for f in pending if f not in done]
    return True
