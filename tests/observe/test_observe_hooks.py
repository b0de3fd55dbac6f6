from __future__ import annotations

import os
import threading
import time

import pytest
import torch
from torch.utils.data import DataLoader
from torch.utils.data._utils import fetch as fetch_mod

from feedline import spans
from feedline.observe._stats import Recorder
from feedline.observe._torch_hooks import (
    CopyLog,
    copy_target,
    install_copy_hook,
    install_fetch_hooks,
    read_worker_spans,
    sched_times,
    uninstall_copy_hook,
    uninstall_fetch_hooks,
)


@pytest.mark.parametrize(("args", "kwargs", "expected"), [
    (("cuda",), {}, ("cuda", False)),
    (("cuda:1",), {"non_blocking": True}, ("cuda", True)),
    ((torch.device("cuda", 0), torch.float16, True), {}, ("cuda", True)),
    ((0,), {}, ("cuda", False)),
    ((torch.float16,), {}, (None, False)),
    ((), {"device": "cpu"}, ("cpu", False)),
    ((torch.zeros(1),), {"non_blocking": False}, ("cpu", False)),
])
def test_copy_target_parses_every_to_form(args: tuple, kwargs: dict, expected: tuple) -> None:
    assert copy_target(args, kwargs) == expected


def test_copy_hook_passes_cpu_calls_through_and_restores_torch() -> None:
    orig = torch.Tensor.to
    log = CopyLog()
    install_copy_hook(log)
    try:
        assert torch.Tensor.to is not orig
        x = torch.arange(4)
        assert x.to(torch.float32).dtype == torch.float32
        assert x.to("cpu", non_blocking=True) is x
    finally:
        uninstall_copy_hook(log)
    assert torch.Tensor.to is orig
    assert log.summary()["count"] == 0  # no CPU->CUDA copy happened


class Slow(torch.utils.data.Dataset):
    def __init__(self, sleep: float = 0.0, spin: float = 0.0) -> None:
        self.sleep, self.spin = sleep, spin

    def __len__(self) -> int:
        return 32

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(self.sleep)
        end = time.thread_time() + self.spin
        while time.thread_time() < end:
            pass
        return torch.full((4,), float(i))


def test_fetch_hook_times_fetch_and_collate_in_process() -> None:
    from torch.utils.data._utils import pin_memory as pin_mod

    pin_before = pin_mod.pin_memory
    rec = Recorder()
    spans.install(rec)
    install_fetch_hooks(None)
    try:
        batches = list(DataLoader(Slow(spin=0.002), batch_size=4, num_workers=0))
    finally:
        uninstall_fetch_hooks()
        spans.uninstall(rec)
    assert len(batches) == 8
    fetches = rec.spans("fetch")
    assert len(fetches) == 8 and len(rec.spans("collate")) == 8
    # 4 samples x 2 ms of CPU each
    assert all(f.attrs["cpu"] >= 0.007 for f in fetches)
    # on the training thread one fetch in RUNQ_EVERY (8) also reads the run-queue delay
    assert sum("runq" in f.attrs for f in fetches) == 1
    assert not hasattr(fetch_mod._MapDatasetFetcher.fetch, "_feedline_orig")
    assert pin_mod.pin_memory is pin_before


def test_fetch_hook_ships_worker_spans_through_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    install_fetch_hooks(tmp_path)
    try:
        batches = list(DataLoader(Slow(sleep=0.001), batch_size=4, num_workers=2))
    finally:
        uninstall_fetch_hooks()
    assert len(batches) == 8
    got = read_worker_spans(tmp_path)
    fetches = [s for s in got if s.stage == "fetch"]
    assert len(fetches) == 8
    assert {s.attrs["worker"] for s in fetches} == {0, 1}
    assert all(s.duration >= 0.004 and s.attrs["cpu"] < s.duration for s in fetches)


def test_read_worker_spans_skips_a_torn_last_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "worker-1.jsonl").write_text('["fetch", 1.0, 2.0, 1, 2, {}]\n["fetch", 3.0')
    assert [s.start for s in read_worker_spans(tmp_path)] == [1.0]


def test_sched_times_counts_this_threads_cpu() -> None:
    cpu0, q0 = sched_times()
    end = time.thread_time() + 0.02
    while time.thread_time() < end:
        pass
    cpu1, q1 = sched_times()
    assert 0.015 <= cpu1 - cpu0 <= 0.5 and q1 >= q0 >= 0.0


def test_sched_times_closes_each_threads_file_when_the_thread_ends() -> None:
    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    sched_times()  # this thread's file stays open
    before = fds()
    for _ in range(20):
        t = threading.Thread(target=sched_times)
        t.start()
        t.join()
    assert fds() <= before + 1


def test_sched_times_in_a_forked_child_reads_the_childs_thread() -> None:
    end = time.thread_time() + 0.05
    while time.thread_time() < end:
        pass
    parent_cpu, _ = sched_times()
    assert parent_cpu >= 0.05
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its own thread has used almost no CPU yet
        os.close(r)
        os.write(w, repr(sched_times()[0]).encode())
        os._exit(0)
    os.close(w)
    got = float(os.read(r, 100).decode())
    os.close(r)
    os.waitpid(pid, 0)
    assert got < parent_cpu / 2
