"""The slot pool budget and fences; the CPU transfer engine; wrap() on CPU."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch

from feedline.errors import DeviceError, ResourceError
from feedline.pipeline import collate
from feedline.pipeline.slots import SlotPool
from feedline.pipeline.transfer import CpuEngine, make_engine
from feedline.pipeline.wrap import wrap


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


def test_cpu_engine_gives_the_user_fresh_memory_never_recycled() -> None:
    layout = _layout()
    pool = SlotPool(2 * layout.nbytes, pin=False, reuse=False)
    pool.configure(layout)
    first = pool.acquire()
    first.arrays[("x",)][:] = 1
    sent, fence = CpuEngine().send({"x": first.tensors[("x",)], "k": ["a"]})
    pool.release(first, fence)
    second = pool.acquire()  # the budget counts only slots in flight
    second.arrays[("x",)][:] = 2
    assert fence is None and sent["k"] == ["a"]
    assert bool((sent["x"] == 1).all())  # the user's batch was not overwritten
    assert second.tensors[("x",)].data_ptr() != sent["x"].data_ptr()
    assert pool.allocated_bytes == layout.nbytes <= pool.peak_bytes <= pool.budget
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
