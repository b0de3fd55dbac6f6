"""The death queue the slot pool, the arena loans and the dropped-loader closer share."""

from __future__ import annotations

import threading
import types
import weakref

import pytest

from feedline.pipeline import forking
from feedline.pipeline._death_queue import DeathQueue


class _Obj:
    pass


@pytest.mark.timeout(10)
def test_the_owner_takes_the_payloads_of_objects_that_died() -> None:
    deaths: DeathQueue[str] = DeathQueue()
    a, b, c = _Obj(), _Obj(), _Obj()
    deaths.register(a, "a")
    token_b = deaths.register(b, "b")
    deaths.register(c, "c")
    callbacks = [r.__callback__ for r in weakref.getweakrefs(a)]
    assert callbacks and all(isinstance(cb, types.BuiltinMethodType) for cb in callbacks)  # C put
    assert deaths.get(0.01) is None and deaths.take() == []  # nothing died yet
    assert deaths.forget(token_b) and not deaths.forget(token_b)
    del a, b
    assert deaths.get(1.0) == "a"
    assert deaths.take() == []  # b was forgotten: its death brings nothing
    deaths.wake()
    assert deaths.get(1.0) is None  # a wake-up, not a death
    deaths.close()
    del c
    assert deaths.take() == []  # closed: its weakref died first
    assert deaths._thread is None  # no handler: no thread


@pytest.mark.timeout(10)
def test_the_collector_thread_handles_deaths_inside_the_fork_gate_and_settles() -> None:
    seen: list[tuple[int, str, bool]] = []

    def handle(payload: int) -> None:
        if payload == 2:
            raise ValueError("boom")
        seen.append((payload, threading.current_thread().name,
                     threading.get_ident() in forking.GATE._working))

    deaths: DeathQueue[int] = DeathQueue(handle, name="test-deaths", failed="handling it", start=False)
    assert deaths.settle(0.1)  # no thread yet: nothing queued
    objs = [_Obj() for _ in range(4)]
    for i, obj in enumerate(objs):
        deaths.register(obj, i)
    thread = deaths._thread
    assert thread is not None and thread.name == "test-deaths" and forking.GATE.stops(thread)
    alive = objs.pop()
    with pytest.warns(RuntimeWarning, match="handling it failed: ValueError: boom"):
        objs.clear()
        assert deaths.settle(5.0)
    assert sorted(seen) == [(0, "test-deaths", True), (1, "test-deaths", True)]
    assert deaths.forget_all() == [3] and deaths.forget_all() == []
    del alive
    assert deaths.settle(5.0) and len(seen) == 2  # forgotten: not handled
    deaths.close()
    assert not thread.is_alive()
