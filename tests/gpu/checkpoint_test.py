"""GPU-machine checks of feedline.checkpoint: CUDA states staged through pinned memory, GDS writes.

Collected only with FEEDLINE_GPU=1 (bench/gpu_check.py). Fails, never skips,
without CUDA; the gds test needs kvikio (the GPU check installs it).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from feedline.checkpoint import Checkpointer, CheckpointStager, load


@pytest.fixture
def scratch() -> Iterator[Path]:
    base = Path(__file__).resolve().parents[2] / ".pytest_cache"  # a disk-backed folder (GDS needs one)
    base.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(dir=base, prefix="ckpt-"))
    yield path
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def _cuda_state() -> dict:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 77)).cuda()
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(8, 256, device="cuda")).sum().backward()
    opt.step()
    return {"model": model.state_dict(), "optim": opt.state_dict(), "odd": torch.arange(1001, device="cuda",
                                                                                      dtype=torch.int16)}


def _same(a: dict, b: dict) -> None:
    for k in a["model"]:
        assert torch.equal(a["model"][k].cpu(), b["model"][k].cpu()), k
    for i, s in a["optim"]["state"].items():
        for k, v in s.items():
            assert torch.equal(v.cpu(), b["optim"]["state"][i][k].cpu()), (i, k)
    assert torch.equal(a["odd"].cpu(), b["odd"].cpu())


@pytest.mark.parametrize("io", ["direct", "auto"])
def test_cuda_state_round_trips_through_pinned_staging(scratch: Path, io: str) -> None:
    state = _cuda_state()
    expect = {"model": {k: v.clone() for k, v in state["model"].items()}, "optim": state["optim"],
              "odd": state["odd"].clone()}
    with Checkpointer(scratch, io=io) as ck:
        ck.save(1, state)
        for v in state["model"].values():
            v.add_(1)  # a kernel right after save() must not reach the checkpoint
        ck.wait()
        assert ck._arena is not None and (ck._arena.pinned or ck.writer_choice.name == "gds")
        got = ck.load()
        assert ck.writer_choice is not None and ck.writer_choice.reason
    _same(expect, got)
    target = {"model": {k: torch.zeros_like(v) for k, v in state["model"].items()}}
    load(scratch, into=target)
    assert target["model"]["0.weight"].is_cuda
    assert torch.equal(target["model"]["0.weight"].cpu(), expect["model"]["0.weight"].cpu())


SPIN = 400_000_000  # GPU cycles (~0.2 s on an H200) that keep a stream busy past the first save's set-up


@pytest.mark.parametrize("io", ["direct", "gds"])
def test_save_stages_after_pending_kernels_on_the_tensors_device(scratch: Path, io: str) -> None:
    """save() copies after the kernels already queued on the tensor's device (its side stream
    waits for that device's current stream), and the copy is complete when save() returns.
    The write is queued behind a busy stream, so a copy that did not wait would stage zeros.
    With two GPUs the state also lives on cuda:1 while cuda:0 is current: the copy runs on
    cuda:1's streams (one side stream made on cuda:0 neither waited for it nor carried it)."""
    devices = [torch.device("cuda", i) for i in range(min(2, torch.cuda.device_count()))]
    assert devices, "needs a CUDA device"
    torch.cuda.set_device(0)
    for dev in devices:
        x = torch.zeros(1 << 24, device=dev)  # 64 MiB
        torch.cuda.synchronize(dev)
        with torch.cuda.device(dev):
            torch.cuda._sleep(SPIN)
        x.fill_(7.0)  # queued behind the sleep on dev's current stream
        with Checkpointer(scratch / f"d{dev.index}", io=io) as ck:
            ck.save(1, {"x": x})
            x.fill_(9.0)  # after save() returns: must not reach the checkpoint
            ck.wait()
            assert ck._streams is not None and ck._streams.devices == [dev]
            got = ck.load()
        assert torch.equal(got["x"].cpu(), torch.full((1 << 24,), 7.0)), f"stale or late bytes from {dev}"


def test_gds_writes_from_device_memory(scratch: Path) -> None:
    state = _cuda_state()
    with Checkpointer(scratch, io="gds") as ck:
        ck.save(3, state)
        ck.wait()
        assert ck.writer_choice is not None and ck.writer_choice.name == "gds"
        assert ck._arena is not None and ck._arena.device.startswith("cuda")
        _same(state, ck.load())


def test_repeated_cuda_saves_allocate_pinned_staging_once(scratch: Path) -> None:
    state = _cuda_state()
    with Checkpointer(scratch, io="direct", keep=2) as ck:
        for step in range(5):
            ck.save(step, state)
        ck.wait()
        assert ck.staging_allocations == 1 and ck.steps() == [3, 4]


def test_dcp_stager_pins_cuda_states() -> None:
    stager = CheckpointStager()
    live = {"w": torch.randn(1000, 10, device="cuda")}
    staged = stager.stage(live)
    live["w"].mul_(2)
    assert staged["w"].device.type == "cpu" and staged["w"].is_pinned()
    assert torch.equal(staged["w"] * 2, live["w"].cpu())
    stager.close()


@pytest.mark.parametrize("io", ["direct", "gds"])
def test_reserve_prepares_cuda_staging_on_the_writer_thread(scratch: Path, io: str) -> None:
    state = _cuda_state()
    with Checkpointer(scratch, io=io) as ck:
        ck.reserve(state)  # pinned host memory (direct) or device memory (gds), allocated in the background
        ck.save(1, state)
        ck.save(2, state)
        ck.wait()
        assert ck.staging_allocations == 1
        assert ck._arena is not None and (ck._arena.pinned if io == "direct" else ck._arena.device.startswith("cuda"))
        _same(state, ck.load())


def test_pinned_staging_locks_about_the_state_size(scratch: Path) -> None:
    """A state just over a power of two page-locks about its size (+1/8 headroom), not twice it: the
    staging buffer is registered host memory (feedline.pinned), not a block of torch's caching host
    allocator, which would round 257 MiB up to 512 MiB and keep it locked after release()."""
    x = torch.zeros((1 << 28) + (1 << 20), dtype=torch.uint8, device="cuda")  # 257 MiB
    torch.cuda.synchronize()
    before = torch.cuda.host_memory_stats().get("allocated_bytes.current", 0)
    with Checkpointer(scratch, io="direct") as ck:
        ck.save(1, {"x": x})
        ck.wait()
        assert torch.equal(ck.load()["x"], x.cpu())
        assert ck._arena is not None and ck._arena.pinned
        buf = ck._arena._buf
        assert torch.from_numpy(buf).is_pinned(), "the staging buffer is not page-locked"
        assert buf.ctypes.data % 4096 == 0
        assert buf.nbytes <= x.numel() * 1.125 + 4096, f"{buf.nbytes / 2**20:.0f} MiB staged for 257 MiB"
        grown = torch.cuda.host_memory_stats().get("allocated_bytes.current", 0) - before
    assert grown < 1 << 20, f"{grown / 2**20:.0f} MiB from torch's pinned allocator (rounds up to a power of two)"
