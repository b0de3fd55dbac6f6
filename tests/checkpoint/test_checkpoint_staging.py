"""Staging and the writer's footprint on the loop: raw-byte copies of every tensor kind,
``reserve()`` touching the staging memory ahead of the first save, the writer thread's
lower priority and CPU time, and buffered writes leaving no pages in the page cache."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from ckstate import assert_same

from feedline.checkpoint import Checkpointer
from feedline.checkpoint._checkpointer import WRITER_NICE
from feedline.checkpoint._layout import make_layout
from feedline.checkpoint._staging import CopyStreams, StagingArena, stage_into
from feedline.errors import ResourceError


def _views_state() -> dict[str, object]:
    """Tensors whose bytes are not simply their storage: views, conj/neg bits, params, odd dtypes."""
    torch.manual_seed(3)
    base = torch.randn(6, 10)
    z = torch.randn(5, dtype=torch.complex64)
    return {
        "param": torch.nn.Parameter(torch.randn(4, 4)),  # requires grad
        "conj": z.conj(),  # lazy conjugate view (is_conj)
        "neg": torch.randn(3, dtype=torch.complex64).conj().imag,  # negative view (is_neg)
        "transposed": base.t(),
        "offset_view": base[2:, 3:7],
        "narrow_contig": base[1:3],  # contiguous, storage offset != 0
        "expanded": torch.arange(3.0).expand(4, 3),
        "bool": torch.rand(33) > 0.5,
        "bf16": torch.randn(7, 3, dtype=torch.bfloat16),
        "f16_scalar": torch.tensor(2.5, dtype=torch.float16),
        "int8": torch.randint(-100, 100, (4097,), dtype=torch.int8),
        "np_fortran": np.asfortranarray(np.arange(12, dtype=np.int32).reshape(3, 4)),
        "np_strided": np.arange(40, dtype=np.float64)[::3],
    }


def test_copy_streams_are_one_per_device_and_kept() -> None:
    """A copy from a CUDA tensor runs on its own device's stream, so the side streams are
    per device (one stream made on the current device neither carries nor waits for a
    cuda:1 copy); each is made once, and a host state makes none."""
    made: list[torch.device] = []

    def make(device: torch.device) -> object:
        made.append(device)
        return object()

    streams = CopyStreams(make)
    zero, one = streams.on(torch.device("cuda", 0)), streams.on(torch.device("cuda", 1))
    assert zero is not one and streams.on(torch.device("cuda", 0)) is zero
    assert made == streams.devices == [torch.device("cuda", 0), torch.device("cuda", 1)]
    layout = make_layout(_views_state())
    stage_into(layout, StagingArena(None).buffer(layout.data_bytes), streams=streams)
    assert len(made) == 2  # host tensors: no stream made, none synchronised


def test_staging_copies_every_tensor_kind_byte_exact() -> None:
    state = _views_state()
    layout = make_layout(state)
    arena = StagingArena(None)
    buf = arena.buffer(layout.data_bytes)
    buf[:] = 0xAB  # stale bytes from an earlier save must all be overwritten
    stage_into(layout, buf)
    for leaf, entry in zip(layout.leaves, layout.entries, strict=True):
        got = bytes(buf[entry.offset : entry.offset + entry.nbytes])
        if isinstance(leaf, np.ndarray):
            want = np.ascontiguousarray(leaf).tobytes()
        else:
            want = leaf.detach().resolve_conj().resolve_neg().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        assert got == want, entry.name


@pytest.mark.parametrize("io", ["buffered", "direct"])
def test_views_and_params_round_trip(tmp_path: Path, io: str) -> None:
    state = _views_state()
    with Checkpointer(tmp_path, io=io) as ck:
        ck.save(1, state)
        back = ck.load()
    expect = {k: (v.detach().resolve_conj().resolve_neg() if isinstance(v, torch.Tensor) else v)
              for k, v in state.items()}
    assert_same(expect, back)


def _rss_anon() -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon in /proc/self/status")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc")
def test_reserve_touches_the_staging_memory_before_the_first_save(tmp_path: Path) -> None:
    state = {"w": torch.ones(48 << 20, dtype=torch.uint8), "step": 1}  # 48 MiB
    with Checkpointer(tmp_path, io="buffered") as ck:
        before = _rss_anon()
        ck.reserve(state)
        ck.wait()  # the prefault runs on the writer thread
        grown = _rss_anon() - before
        assert grown >= 44 << 20, f"reserve() made only {grown} bytes resident"
        assert ck.staging_allocations == 1
        ck.save(5, state)
        ck.save(6, state)
        assert ck.staging_allocations == 1  # the saves reuse the reserved buffer
        assert_same(state, ck.load())


def test_reserve_over_the_budget_fails_at_once(tmp_path: Path) -> None:
    with Checkpointer(tmp_path, pinned_budget="1MiB") as ck:
        with pytest.raises(ResourceError, match="pinned_budget"):
            ck.reserve({"w": torch.zeros(2 << 20, dtype=torch.uint8)})
        assert ck.staging_allocations == 0


def test_a_skipping_checkpointer_does_not_skip_the_save_after_reserve(tmp_path: Path) -> None:
    state = {"w": torch.ones(16 << 20, dtype=torch.uint8)}
    with Checkpointer(tmp_path, io="buffered", if_busy="skip") as ck:
        ck.reserve(state)
        assert ck.save(0, state)  # waits for the reserve; only a save in flight makes it skip
        ck.wait()
        assert ck.stats.skipped == 0 and ck.latest() == 0


@pytest.mark.skipif(not hasattr(os, "setpriority"), reason="no per-thread priorities here")
def test_the_writer_thread_runs_at_a_lower_priority_than_the_loop(tmp_path: Path) -> None:
    me = threading.get_native_id()
    loop_nice = os.getpriority(os.PRIO_PROCESS, me)
    with Checkpointer(tmp_path, io="buffered") as ck:
        ck.save(0, {"x": torch.arange(1000)})
        ck.wait()
        assert ck.writer_tid is not None and ck.writer_tid != me
        assert os.getpriority(os.PRIO_PROCESS, ck.writer_tid) == min(19, loop_nice + WRITER_NICE)
        assert os.getpriority(os.PRIO_PROCESS, me) == loop_nice  # the loop's own priority is untouched
        assert ck.stats.last_writer_cpu_s > 0


@pytest.mark.skipif(shutil.which("fincore") is None, reason="needs util-linux fincore")
def test_buffered_checkpoint_data_leaves_the_page_cache(tmp_path: Path) -> None:
    with Checkpointer(tmp_path, io="buffered") as ck:
        ck.save(0, {"w": torch.ones(32 << 20, dtype=torch.uint8)})
        ck.wait()
    data = next(p for p in tmp_path.iterdir() if p.suffix == ".bin")
    out = subprocess.run(["fincore", "--raw", "--noheadings", "--bytes", "-o", "RES", str(data)],
                         capture_output=True, text=True, check=True, timeout=30).stdout
    fstype = subprocess.run(["stat", "-f", "-c", "%T", str(tmp_path)], capture_output=True, text=True,
                            check=True, timeout=30).stdout.strip()
    if fstype in ("tmpfs", "ramfs"):
        pytest.skip(f"{tmp_path} is on {fstype}: its pages are the file")
    assert int(out.split()[0]) < 1 << 20, f"{out.strip()} bytes of the checkpoint stayed cached"


SUB_BYTE = [getattr(torch, n) for n in (*(f"uint{i}" for i in range(1, 8)), *(f"int{i}" for i in range(1, 8)))
            if isinstance(getattr(torch, n, None), torch.dtype)]


@pytest.mark.skipif(not SUB_BYTE, reason="this torch has no sub-byte dtypes")
def test_dtypes_without_a_copy_kernel_round_trip_byte_exact(tmp_path: Path) -> None:
    # torch.uint1-7/int1-7 are shells: Tensor.copy_ has no kernel for them, and every save of one failed
    # with a bare NotImplementedError from the staging copy; load(into=) the same.
    raw = torch.randint(0, 256, (len(SUB_BYTE), 6), dtype=torch.uint8)
    state = {str(dt): raw[i].view(dt).reshape(2, 3).t() for i, dt in enumerate(SUB_BYTE)}  # strided, too
    into = {k: torch.zeros(3, 2, dtype=torch.uint8).view(v.dtype) for k, v in state.items()}
    with Checkpointer(tmp_path, io="buffered") as ck:
        ck.save(1, state)
        back = ck.load()
        ck.load(into=into)
    for k, v in state.items():
        for got in (back[k], into[k]):
            assert got.dtype == v.dtype and torch.equal(got.view(torch.uint8), v.view(torch.uint8)), k
