from __future__ import annotations

import os
import time
from typing import Any

import pytest
import torch
from obsdata import Dropping, External, Piped, Pooled, Slow, drop_none, worker_flag
from torch.utils.data import DataLoader
from torch.utils.data._utils import fetch as fetch_mod
from torch.utils.data._utils import pin_memory as pin_mod

from feedline.observe import _clock, _replay, _session, _torch_hooks
from feedline.observe._stats import Recorder
from feedline.observe._torch_hooks import (
    CopyLog,
    HookTargets,
    TorchHooks,
    WorkerInit,
    copy_device,
    copy_target,
    read_worker_spans,
    sched_times,
)


def hooks(worker_dir: Any = None, label: str = "L") -> tuple[TorchHooks, Recorder, list[str]]:
    rec, seen = Recorder(), []

    def on_next(owner: Any, fetch: Any) -> Any:
        seen.append("next")
        return fetch()

    h = TorchHooks(HookTargets(rec, CopyLog(), on_next, lambda *a: seen.append("iter"),
                               lambda loader: label, lambda: label,
                               None if worker_dir is None else str(worker_dir)))
    return h, rec, seen


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


@pytest.mark.parametrize(("args", "kwargs", "expected"), [
    (("cuda:1",), {"non_blocking": True}, "cuda:1"),
    ((torch.device("cuda", 1), torch.float16, True), {}, torch.device("cuda", 1)),
    ((1,), {}, 1),
    ((torch.float16,), {"device": "cuda:1"}, "cuda:1"),
    ((torch.float16,), {}, None),
])
def test_copy_device_keeps_the_index(args: tuple, kwargs: dict, expected: object) -> None:
    """The h2d timing events go on the target device's stream (where the copy runs), so the
    target keeps its index: to("cuda:1") with cuda:0 current is timed on cuda:1."""
    assert copy_device(args, kwargs) == expected


def test_hooks_are_one_object_that_restores_torch() -> None:
    before = (torch.Tensor.to, fetch_mod._MapDatasetFetcher.fetch, pin_mod.pin_memory,
              DataLoader.__iter__)
    h, _, _ = hooks()
    with h.installed():
        assert torch.Tensor.to is not before[0]
        x = torch.arange(4)
        assert x.to(torch.float32).dtype == torch.float32
        assert x.to("cpu", non_blocking=True) is x
    assert (torch.Tensor.to, fetch_mod._MapDatasetFetcher.fetch, pin_mod.pin_memory,
            DataLoader.__iter__) == before
    assert "to" not in vars(torch.Tensor)  # the inherited method is back, not a copy of it
    assert h.t.copies.summary()["count"] == 0  # no CPU->CUDA copy happened


def test_stacked_hooks_removed_out_of_order_pass_through_and_restore() -> None:
    before = fetch_mod._MapDatasetFetcher.fetch
    a, rec_a, _ = hooks()
    b, rec_b, _ = hooks()
    a.install()
    b.install()
    a.uninstall()  # out of order: a's patches stay under b's, as pass-throughs
    list(DataLoader(Slow(), batch_size=4))
    assert rec_a.spans("fetch") == [] and len(rec_b.spans("fetch")) == 8
    b.uninstall()
    list(DataLoader(Slow(), batch_size=4))
    assert len(rec_b.spans("fetch")) == 8
    assert _torch_hooks._root(fetch_mod._MapDatasetFetcher.fetch) is before


def test_fetch_hook_times_fetch_and_collate_in_process() -> None:
    h, rec, seen = hooks()
    with h.installed():
        batches = list(DataLoader(Slow(spin=0.002), batch_size=4, num_workers=0))
    assert len(batches) == 8
    fetches = rec.spans("fetch")
    assert len(fetches) == 8 and len(rec.spans("collate")) == 8
    assert all(f.attrs["cpu"] >= 0.007 and f.attrs["loader"] == "L" for f in fetches)
    # on the consumer thread one fetch in RUNQ_EVERY (8) also reads the run-queue delay
    assert sum("runq" in f.attrs for f in fetches) == 1
    assert seen.count("iter") == 1 and seen.count("next") == 9  # 8 batches + StopIteration


@pytest.mark.timeout(180)
@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_worker_fetches_are_timed_under_every_start_method(tmp_path, method: str) -> None:  # type: ignore[no-untyped-def]
    h, _, _ = hooks(tmp_path, label="train")
    loader = DataLoader(Slow(sleep=0.001), batch_size=4, num_workers=2,
                        multiprocessing_context=method, worker_init_fn=worker_flag)
    with h.installed():
        batches = list(loader)
    assert len(batches) == 8
    assert loader.worker_init_fn is worker_flag  # the user's loader is left as it was
    got = read_worker_spans(tmp_path)
    fetches = [s for s in got if s.stage == "fetch"]
    assert len(fetches) == 8 and len([s for s in got if s.stage == "collate"]) == 8
    assert {s.attrs["worker"] for s in fetches} == {0, 1}
    assert {s.attrs["loader"] for s in fetches} == {"train"}
    assert all(s.duration >= 0.004 and s.attrs["cpu"] < s.duration for s in fetches)
    assert all(s.pid != os.getpid() for s in fetches)


def test_a_worker_charges_its_fetches_with_the_cpu_of_all_its_threads(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # the dataset decodes on its own thread pool: the fetching thread only waits for it,
    # yet the fetch is CPU work (decode), not time blocked (read)
    h, _, _ = hooks(tmp_path, label="train")
    with h.installed():
        batches = list(DataLoader(Pooled(spin=0.004, n=16), batch_size=4, num_workers=1))
    assert len(batches) == 4
    fetches = [s for s in read_worker_spans(tmp_path) if s.stage == "fetch"]
    assert len(fetches) == 4
    assert all(s.attrs["cpu"] >= 0.8 * 4 * 0.004 for s in fetches), [s.attrs for s in fetches]


@pytest.mark.parametrize("workers", [0, 1])
def test_a_fetch_is_charged_with_the_cpu_of_the_decoders_it_ran(tmp_path, workers: int) -> None:  # type: ignore[no-untyped-def]
    # each item waits for a child interpreter spinning 20 ms: the fetch's own thread only
    # waits, yet the fetch is CPU work (decode), not time blocked (read)
    h, rec, _ = hooks(tmp_path, label="train")
    with h.installed():
        batches = list(DataLoader(External(spin=0.02, n=4), batch_size=2, num_workers=workers))
    assert len(batches) == 2
    spans = rec.spans("fetch") if workers == 0 else read_worker_spans(tmp_path)
    fetches = [s for s in spans if s.stage == "fetch"]
    assert len(fetches) == 2
    assert all(s.attrs.get("child_cpu", 0.0) >= 0.8 * 2 * 0.02 for s in fetches), [
        s.attrs for s in fetches]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 1])
def test_a_fetch_is_charged_with_the_cpu_of_a_decoder_process_it_keeps(tmp_path, workers: int) -> None:  # type: ignore[no-untyped-def]
    # one long-lived child per process, fed through pipes, spins 20 ms an item: the fetch's
    # thread only waits on a pipe, yet the fetch is CPU work (decode), not time blocked
    h, rec, _ = hooks(tmp_path, label="train")
    data = Piped(spin=0.02, n=6)
    try:
        with h.installed():
            batches = list(DataLoader(data, batch_size=2, num_workers=workers))
    finally:
        data.close()
    assert len(batches) == 3
    spans = rec.spans("fetch") if workers == 0 else read_worker_spans(tmp_path)
    fetches = sorted((s for s in spans if s.stage == "fetch"), key=lambda s: s.start)
    assert len(fetches) == 3
    # the decoder starts inside the first fetch; the later ones find it alive
    assert all(s.attrs.get("child_cpu", 0.0) >= 0.7 * 2 * 0.02 for s in fetches[1:]), [
        s.attrs for s in fetches]


def test_a_collate_that_drops_failed_samples_is_counted() -> None:
    h, rec, _ = hooks()
    with h.installed():
        batches = list(DataLoader(Dropping(n=12, bad=3), batch_size=3, collate_fn=drop_none))
    assert [len(b) for b in batches] == [2, 2, 2, 2]
    col = rec.spans("collate")
    assert [s.attrs.get("dropped") for s in col] == [1, 1, 1, 1]
    summary = _session.dropped(col, [], 3)["dropped"]
    assert summary == {"samples": 4, "given": 12, "empty_batches": 0, "by": "collate_fn"}
    assert _torch_hooks.batch_rows(None) == 0 and _torch_hooks.batch_rows(["a", "b"]) == 2
    assert _torch_hooks.batch_rows({"x": torch.zeros(5, 2), "y": [1] * 5}) == 5


def test_worker_init_is_picklable_and_calls_the_users_function(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import pickle

    w = pickle.loads(pickle.dumps(WorkerInit(worker_flag, str(tmp_path), "x")))
    assert w.inner is worker_flag and w.loader == "x"


def test_read_worker_spans_skips_a_torn_last_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "worker-1.jsonl").write_text('["fetch", 1.0, 2.0, 1, 2, {}]\n["fetch", 3.0')
    assert [s.start for s in read_worker_spans(tmp_path)] == [1.0]


def test_sched_times_counts_this_threads_cpu_and_keeps_no_file_open() -> None:
    fds = len(os.listdir("/proc/self/fd"))
    cpu0, q0 = sched_times()
    end = time.thread_time() + 0.02
    while time.thread_time() < end:
        pass
    cpu1, q1 = sched_times()
    assert 0.015 <= cpu1 - cpu0 <= 0.5 and q1 >= q0 >= 0.0
    assert len(os.listdir("/proc/self/fd")) == fds


def test_a_worker_reads_the_run_queue_of_every_thread_it_has() -> None:
    # a worker's fetch is charged with the CPU of all its threads (a dataset's own thread
    # pool), so its wait for a core is read on all of them too
    import threading

    stop = threading.Event()
    t = threading.Thread(target=stop.wait, daemon=True)
    t.start()
    try:
        before = _torch_hooks.process_runq()
        assert threading.get_native_id() in before and t.native_id in before
        assert _torch_hooks.process_runq_since(before) >= 0.0
        assert _torch_hooks.process_runq_since({}) >= sum(before.values()) * 0.999
    finally:
        stop.set()
        t.join()


@pytest.mark.parametrize("module", [_torch_hooks, _session, _clock, _replay])
def test_observe_keeps_no_mutable_module_state(module: Any) -> None:
    """Hooks, clocks and the replay live on objects a Session owns, not in module globals."""
    mutable = {k: type(v).__name__ for k, v in vars(module).items()
               if isinstance(v, (list, dict, set)) and not k.startswith("__")}
    assert mutable == {}
    assert not any(hasattr(v, "__del__") and isinstance(v, type) and "__del__" in vars(v)
                   for v in vars(module).values())
