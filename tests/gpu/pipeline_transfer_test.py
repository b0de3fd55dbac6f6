"""GPU-machine checks of the loader's transfer path (copy stream, events, slot reuse).

Collected only with FEEDLINE_GPU=1 (bench/gpu_check.py runs ``pytest tests/gpu``).
Fails, never skips, without CUDA. ``torch.cuda._sleep`` holds the copy stream
busy so that a missing event wait or an early slot reuse shows up as wrong
data instead of passing by luck.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

import feedline
from feedline.errors import DeviceError
from feedline.pipeline import collate
from feedline.pipeline.slots import SlotPool
from feedline.pipeline.transfer import CudaEngine, make_engine

DEV = torch.device("cuda:0")
SPIN = 50_000_000  # GPU cycles (~tens of ms) that keep a stream busy


def _require_cuda() -> None:
    assert torch.cuda.is_available(), "these tests need a CUDA device (run them on the GPU box)"


class Numbers:
    """Sample i: {"x": float32[1024] filled with i, "y": i}."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"x": np.full((1024,), i, np.float32), "y": i}


def test_copy_runs_on_its_own_stream_and_the_consumer_waits_on_its_event() -> None:
    _require_cuda()
    engine = CudaEngine(DEV)
    assert engine.stream != torch.cuda.current_stream(DEV)
    host = torch.arange(1 << 22, dtype=torch.float32).pin_memory()
    with torch.cuda.stream(engine.stream):
        torch.cuda._sleep(SPIN)  # the copy cannot start before this finishes
    t0 = time.perf_counter()
    tree, fence = engine.send({"x": host})
    issued = time.perf_counter() - t0
    assert isinstance(fence, torch.cuda.Event)
    assert not fence.query(), "the copy finished at once: it did not run behind the busy stream"
    assert issued < 0.05, "send() blocked the host: the copy is not asynchronous"
    batch = engine.accept(tree, fence)  # consumer stream waits on the event (device side)
    expect = torch.arange(1 << 22, dtype=torch.float32, device=DEV)
    same = torch.equal(batch["x"], expect)  # runs on the consumer stream, after the copy
    assert same and batch["x"].device == DEV


def test_slot_is_not_reused_before_its_copy_completed() -> None:
    _require_cuda()
    layout = collate.infer_layout([{"x": np.zeros(1 << 22, np.float32)}], 1, 1)
    pool = SlotPool(layout.nbytes, pin=True)  # room for exactly one slot
    pool.configure(layout)
    engine = CudaEngine(DEV)
    slot = pool.acquire()
    assert slot.tensors[("x",)].is_pinned()
    slot.arrays[("x",)][:] = 1.0
    with torch.cuda.stream(engine.stream):
        torch.cuda._sleep(SPIN)
    tree, fence = engine.send({"x": slot.tensors[("x",)]})
    pool.release(slot, fence)
    again = pool.acquire()  # must wait for the fence: there is only one slot
    assert again is slot
    again.arrays[("x",)][:] = 2.0  # overwrite immediately
    batch = engine.accept(tree, fence)
    torch.cuda.synchronize()
    assert bool((batch["x"] == 1.0).all()), "the slot was overwritten while its copy was pending"
    pool.close()


def test_pinned_slots_lock_their_size_and_copy_asynchronously() -> None:
    """A slot of 5 MiB + 4 KiB locks that (torch's pinned allocator would lock 8 MiB and keep it after
    the pool closes), is pinned for CUDA, and its copy to the device does not block the host."""
    _require_cuda()
    n = ((5 << 20) + 4096) // 4
    layout = collate.infer_layout([{"x": np.zeros(n, np.float32)}], 1, 1)
    before = torch.cuda.host_memory_stats().get("allocated_bytes.current", 0)
    pool = SlotPool(layout.nbytes, pin=True)
    pool.configure(layout)
    slot = pool.acquire()
    host = slot.tensors[("x",)]
    assert host.is_pinned() and host.data_ptr() % 4096 == 0
    assert torch.cuda.host_memory_stats().get("allocated_bytes.current", 0) - before < 1 << 20
    slot.arrays[("x",)][:] = 3.0
    engine = CudaEngine(DEV)
    with torch.cuda.stream(engine.stream):
        torch.cuda._sleep(SPIN)
    t0 = time.perf_counter()
    tree, fence = engine.send({"x": host})
    assert time.perf_counter() - t0 < 0.05, "the copy from a registered slot blocked the host"
    assert not fence.query()
    batch = engine.accept(tree, fence)
    torch.cuda.synchronize()
    assert bool((batch["x"] == 3.0).all())
    pool.release(slot, fence)
    pool.close()


def test_held_batches_stay_intact_on_cuda() -> None:
    _require_cuda()
    slot_bytes = 16 * (1024 * 4 + 8)
    loader = feedline.Loader(Numbers(160), batch_size=16, device="cuda:0", workers=4,
                             prefetch=2, pinned_budget=2 * slot_bytes, shuffle=False)
    held = list(loader)
    torch.cuda.synchronize()
    assert len(held) == 10
    for b, batch in enumerate(held):
        expect = torch.arange(16 * b, 16 * b + 16, device=DEV)
        assert batch["x"].device == DEV and torch.equal(batch["y"], expect)
        assert torch.equal(batch["x"][:, 0], expect.float())
        assert torch.equal(batch["x"][:, -1], expect.float())
    assert loader.stats["pinned_peak_bytes"] <= 2 * slot_bytes
    loader.close()


def test_process_workers_to_cuda() -> None:
    _require_cuda()
    with feedline.Loader(Numbers(64), batch_size=8, device="cuda:0", workers=2,
                         worker_type="process", shuffle=False) as loader:
        ys = [int(v) for b in loader for v in b["y"].tolist()]
        assert ys == list(range(64))


def test_a_device_index_the_host_lacks_is_a_device_error() -> None:
    _require_cuda()
    assert make_engine("cuda").device == torch.device("cuda", torch.cuda.current_device())
    missing = f"cuda:{torch.cuda.device_count()}"
    try:
        make_engine(missing)
    except DeviceError as e:
        assert missing in str(e) and e.fix
    else:
        raise AssertionError(f"{missing} was accepted")


class Boxed:
    """A custom batch (the DataLoader contract: pin_memory() and to()) holding its tensor."""

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t

    def pin_memory(self) -> Boxed:
        return Boxed(self.t.pin_memory())

    def to(self, device: torch.device, non_blocking: bool = False) -> Boxed:
        return Boxed(self.t.to(device, non_blocking=non_blocking))


def test_a_custom_batch_is_protected_with_record_stream_like_a_container() -> None:
    """The device tensor a custom batch's to() made on the copy stream is recorded on the
    consumer stream: freed while the consumer's kernels still read it, its block is not
    handed to the next copy (without record_stream the same-size block comes straight back
    to the copy stream, and the next H2D copy overwrites what the kernel reads)."""
    _require_cuda()
    engine = CudaEngine(DEV)
    n = 1 << 22
    for box in (lambda t: Boxed(t), lambda t: {"x": t}):  # the custom batch, then a container
        torch.cuda.synchronize()
        tree, fence = engine.send(box(torch.ones(n).pin_memory()))
        batch = engine.accept(tree, fence)
        t = batch.t if isinstance(batch, Boxed) else batch["x"]
        ptr = t.data_ptr()
        torch.cuda._sleep(SPIN)  # the consumer stream is busy ...
        total = t.sum()  # ... and reads the batch after that
        del batch, tree, t
        tree2, _ = engine.send(box(torch.zeros(n).pin_memory()))
        t2 = tree2.t if isinstance(tree2, Boxed) else tree2["x"]
        assert t2.data_ptr() != ptr, "the consumer's block went to the next copy while in use"
        assert total.item() == n
