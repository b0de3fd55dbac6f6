"""The slot pool budget and fences; the CPU transfer engine; wrap() on CPU."""

from __future__ import annotations

import ctypes
import signal
import sys
import threading
import weakref
from typing import Any

import pytest
import torch

from feedline.errors import DeviceError, ResourceError
from feedline.pipeline import collate, slots
from feedline.pipeline.slots import SlotPool
from feedline.pipeline.transfer import CpuEngine, make_engine
from feedline.pipeline.wrapping import wrap


def _layout(rows: int = 4, width: int = 16) -> collate.Layout:
    return collate.infer_layout([{"x": torch.zeros(width)}], rows, 1)


class EventFence:
    """A host-side fence with the torch.cuda.Event interface (query/synchronize)."""

    def __init__(self) -> None:
        self.done = threading.Event()

    def query(self) -> bool:
        return self.done.is_set()

    def synchronize(self) -> None:
        self.done.wait(30)


def test_pool_never_exceeds_budget_and_producers_wait() -> None:
    layout = _layout()
    pool = SlotPool(3 * layout.nbytes, pin=False)
    pool.configure(layout)
    held = [pool.acquire() for _ in range(3)]
    assert pool.allocated_bytes == 3 * layout.nbytes
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(pool.acquire()))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive() and not got  # the fourth producer waits
    fence = EventFence()
    pool.release(held[0], fence)
    waiter.join(0.2)
    assert waiter.is_alive()  # the slot is not reused before its copy completed
    fence.done.set()
    waiter.join(30)
    assert got and got[0] is held[0]
    assert pool.peak_bytes <= pool.budget
    pool.close()


def test_slot_larger_than_budget_is_a_resource_error() -> None:
    pool = SlotPool(100, pin=False)
    with pytest.raises(ResourceError, match="pinned_budget"):
        pool.configure(_layout())


def test_cpu_engine_gives_the_user_memory_no_later_batch_overwrites() -> None:
    layout = _layout()
    pool = SlotPool(2 * layout.nbytes, pin=False, reuse=False)
    pool.configure(layout)
    first = pool.acquire()
    first.arrays[("x",)][:] = 1
    sent, fence = CpuEngine().send({"x": first.tensors[("x",)], "k": ["a"]})
    pool.release(first, fence)
    del first
    second = pool.acquire()  # the budget counts only slots in flight
    second.arrays[("x",)][:] = 2
    assert fence is None and sent["k"] == ["a"]
    assert bool((sent["x"] == 1).all())  # the user's batch was not overwritten
    assert second.tensors[("x",)].data_ptr() != sent["x"].data_ptr()
    assert pool.allocated_bytes == layout.nbytes <= pool.peak_bytes <= pool.budget
    pool.close()


def test_cpu_slot_memory_comes_back_when_every_lent_view_is_gone() -> None:
    layout = collate.infer_layout([{"x": torch.zeros(16), "y": torch.zeros(2, dtype=torch.int64)}], 4, 1)
    pool = SlotPool(4 * layout.nbytes, pin=False, reuse=False)
    pool.configure(layout)

    def lend(value: int) -> tuple[dict[Any, torch.Tensor], int]:
        slot = pool.acquire()
        for a in slot.arrays.values():
            a[:] = value
        batch = {p[0]: t[:3] for p, t in slot.tensors.items()}  # what the runtime hands out
        pool.release(slot)
        return batch, slot.id  # the id of the memory lent (a new slot gets a new id)

    batch, first_id = lend(1)
    keep_y, keep_x = batch["y"][1:], batch["x"].numpy()[2]  # views outlive the batch dict
    del batch
    other, other_id = lend(2)
    assert other_id != first_id  # still held through the views
    del keep_y
    _third, third_id = lend(3)  # held
    assert third_id not in (first_id, other_id)  # x's view still holds it
    assert keep_x.tolist() == [1.0] * 16  # intact
    del keep_x, other
    _again, again_id = lend(4)
    assert again_id in (first_id, other_id)  # memory is reused once let go
    assert pool.allocated_bytes <= pool.peak_bytes <= pool.budget
    pool.close()


def _lend(pool: SlotPool) -> tuple[dict[Any, torch.Tensor], int]:
    slot = pool.acquire()
    batch = {p[0]: t for p, t in slot.tensors.items()}  # what the CPU runtime hands out
    pool.release(slot)
    return batch, slot.id


def test_a_producer_at_the_soft_cap_waits_for_the_loops_previous_batch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``for b in loader`` drops its previous batch just after the next is handed out: a
    producer asking for a slot at that moment gets that batch's memory, not a new slot."""
    monkeypatch.setattr(slots, "REUSE_WAIT_S", 60.0)  # only the returned slot ends the wait
    layout = _layout()
    pool = SlotPool(16 * layout.nbytes, pin=False, reuse=False, soft_cap=2)
    pool.configure(layout)
    previous, previous_id = _lend(pool)
    _current, _ = _lend(pool)  # the loop's batch, held throughout
    got: list[int] = []
    producer = threading.Thread(target=lambda: got.append(pool.acquire().id))
    producer.start()
    del previous  # the loop rebinds its variable
    producer.join(60)
    assert got == [previous_id] and pool.slots_created == 2 and pool.reuse_waits == 1
    pool.close()


def test_a_loop_that_keeps_its_batches_gets_new_slots_after_a_short_wait(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slots, "REUSE_WAIT_S", 0.001)
    layout = _layout()
    pool = SlotPool(64 * layout.nbytes, pin=False, reuse=False, soft_cap=2)
    pool.configure(layout)
    kept = [_lend(pool) for _ in range(20)]
    assert len({i for _, i in kept}) == 20 == pool.slots_created
    assert pool.reuse_waits <= 4 and pool.soft_cap == 24  # 2 -> 3 -> 6 -> 12 -> 24: one wait each
    for k, (batch, _) in enumerate(kept):
        batch["x"][:] = k
    assert [int(b["x"][0, 0]) for b, _ in kept] == list(range(20))  # none shares memory
    pool.close()


@pytest.mark.timeout(30)
def test_a_lone_late_return_costs_one_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    """A wait that times out long after the previous one (a worker that finished a later
    batch first, a busy host) raises the cap by one, not to twice as many slots."""
    monkeypatch.setattr(slots, "REUSE_WAIT_S", 0.001)
    monkeypatch.setattr(slots, "REGROW_S", 0.0)  # every timeout counts as a lone one
    layout = _layout()
    pool = SlotPool(64 * layout.nbytes, pin=False, reuse=False, soft_cap=2)
    pool.configure(layout)
    kept = [_lend(pool) for _ in range(5)]
    assert pool.slots_created == 5 and pool.soft_cap == 5 and pool.reuse_waits == 3
    del kept
    pool.close()


def test_make_engine_checks_the_device() -> None:
    if torch.cuda.is_available():
        assert make_engine("cuda").device.index == torch.cuda.current_device()
    else:
        for device in ("cuda:0", "cuda"):
            with pytest.raises(DeviceError, match="CUDA"):
                make_engine(device)
    with pytest.raises(ValueError, match="device"):
        make_engine("mps:0")


def test_wrap_on_cpu_passes_batches_through() -> None:
    data = [{"x": torch.full((2,), float(i)), "tag": i} for i in range(5)]
    wrapped = wrap(data, device="cpu")
    assert len(wrapped) == 5
    assert [b["tag"] for b in wrapped] == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="prefetch"):
        wrap(data, device="cpu", prefetch=0)


class _Interrupted(Exception):
    """What the test's SIGINT handler raises (a Ctrl-C's ``KeyboardInterrupt`` stand-in)."""


@pytest.mark.timeout(30)
@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="POSIX signals")
def test_a_ctrl_c_as_a_lent_slot_comes_back_reaches_the_loop() -> None:
    """A signal that is pending as the user's batch dies: Python checks for signals when a
    Python function starts, so a Python-level return callback (``weakref.finalize``) had the
    Ctrl-C raised inside it, printed as "Exception ignored in: <finalize object>" and lost
    (3-4 of 1000 random SIGINTs to a loop dropping batches; 1 of 480 cases of the signals
    test). A weakref callback registered after the pool's runs before it (newest first) and
    makes SIGINT pending through C ``raise()``, so the pool's callback is reached with it."""
    layout = _layout()
    pool = SlotPool(4 * layout.nbytes, pin=False, reuse=False)
    pool.configure(layout)
    batch, first_id = _lend(pool)
    (ref, _), = pool._deaths._refs.values()
    anchor = ref()

    class PendingSigint:  # ctypes converts the callback's argument (the weakref) to SIGINT
        @classmethod
        def from_param(cls, _obj: Any) -> ctypes.c_int:
            return ctypes.c_int(signal.SIGINT)

    raise_ = getattr(ctypes.CDLL(None), "raise")
    raise_.argtypes, raise_.restype = [PendingSigint], ctypes.c_int
    ours = weakref.ref(anchor, raise_)  # noqa: F841 (kept alive for its callback)
    del anchor
    previous = signal.signal(signal.SIGINT, lambda *_: (_ for _ in ()).throw(_Interrupted()))
    ignored: list[Any] = []
    hook, sys.unraisablehook = sys.unraisablehook, ignored.append
    try:
        with pytest.raises(_Interrupted):
            del batch  # the anchor dies: raise(SIGINT), then the pool's callback
            for _ in range(1000):  # a backward jump: a pending signal's handler runs here
                pass
    finally:
        signal.signal(signal.SIGINT, previous)
        sys.unraisablehook = hook
    assert ignored == []  # before: the interrupt, raised inside the callback and dropped
    _again, again_id = _lend(pool)
    assert again_id == first_id  # the slot came back all the same
    pool.close()
