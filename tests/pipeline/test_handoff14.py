"""Handing a batch over without a lock a Ctrl-C could leave held (feedline.pipeline.handoff)."""

from __future__ import annotations

import threading
import types
from concurrent.futures import Future

import pytest

from feedline.pipeline.handoff import Handoff, _Waiter, all_done, first_done


@pytest.mark.timeout(10)
def test_a_handoffs_lock_is_entered_in_c() -> None:
    """``with future._condition:`` on the training thread: a Python ``__enter__``
    (``threading.Condition``'s) had a Ctrl-C raised after the lock was taken, leaving it held."""
    cond = Handoff()._condition
    assert isinstance(type(cond).__enter__, types.MethodDescriptorType)
    assert isinstance(type(cond).__exit__, types.MethodDescriptorType)


@pytest.mark.timeout(10)
def test_first_done_waits_for_the_first_and_leaves_no_waiter() -> None:
    a, b = Handoff(), Handoff()
    assert first_done([a, b], 0.01) == set()
    timer = threading.Timer(0.05, b.set_result, (2,))
    timer.start()
    assert first_done([a, b], 5.0) == {b}
    timer.join()
    assert a._waiters == [] and b._waiters == []
    a.set_exception(ValueError("x"))
    assert first_done([a, b], 0) == {a, b}
    assert all_done([a, b], 0.1) and not all_done([Handoff()], 0.01)
    plain: Future[int] = Future()  # a stdlib Future among them: the stdlib's wait
    plain.set_result(1)
    assert first_done([plain], 1.0) == {plain}


@pytest.mark.timeout(10)
def test_a_waiter_left_installed_never_blocks_the_worker() -> None:
    """What a Ctrl-C between installing and removing a waiter leaves: before, a waiter whose
    ``Event`` lock the interrupt had left held blocked the worker's ``set_result`` for ever."""
    fut = Handoff()
    with fut._condition:
        fut._waiters.append(_Waiter())  # type: ignore[arg-type]
    worker = threading.Thread(target=fut.set_result, args=(1,))
    worker.start()
    worker.join(5)
    assert not worker.is_alive() and fut.result(0) == 1
