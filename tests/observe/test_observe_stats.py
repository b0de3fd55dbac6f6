from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from feedline import spans
from feedline.observe._stats import EMPTY_STATS, Recorder, Span, StageStats, summarize


@given(st.lists(st.floats(min_value=0, max_value=10, allow_nan=False), min_size=1, max_size=200))
def test_summarize_matches_numpy_and_is_ordered(xs: list[float]) -> None:
    s = summarize(xs)
    arr = np.array(xs)
    assert s.count == len(xs)
    assert s.max == pytest.approx(arr.max())
    assert s.p99 == pytest.approx(np.percentile(arr, 99))
    assert s.p50 <= s.p95 + 1e-12 <= s.p99 + 2e-12 <= s.max + 3e-12
    assert StageStats.from_dict(s.to_dict()) == s


def test_summarize_empty() -> None:
    assert summarize([]) == EMPTY_STATS


def test_tail_is_not_hidden_by_the_mean() -> None:
    s = summarize([0.001] * 99 + [1.0])
    assert s.p50 == pytest.approx(0.001)
    assert s.max == 1.0 and s.p99 > 10 * s.p50


def test_recorder_is_a_thread_safe_sink_with_a_cap() -> None:
    rec = Recorder(max_spans=1000)
    spans.install(rec)
    try:
        # All four alive at once: thread idents are only unique among live threads.
        start = threading.Barrier(4)

        def work() -> None:
            start.wait(timeout=30)
            for i in range(300):
                spans.emit("decode", float(i), float(i) + 0.5, key=i)

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        spans.uninstall(rec)
    assert len(rec.spans()) == 1000 and rec.dropped == 200
    assert rec.stages()["decode"].mean == pytest.approx(0.5)
    assert len({s.tid for s in rec.spans()}) >= 2
    spans.emit("decode", 0.0, 1.0)  # uninstalled: not recorded
    assert len(rec.spans()) == 1000


def test_recorder_rejects_bad_cap() -> None:
    with pytest.raises(ValueError, match="max_spans"):
        Recorder(max_spans=0)


def test_span_round_trip() -> None:
    s = Span("read", 1.0, 1.5, 12, 34, {"shard": "a.tar"})
    assert Span.from_list(s.to_list()) == s and s.duration == 0.5


def test_host_sampler_summarises_real_samples() -> None:
    import time

    from feedline.observe._host import HostSampler

    h = HostSampler(interval=0.02).start()
    deadline = time.perf_counter() + 30
    # Keep a core busy (so CPU use is visible) until the sampler has taken 3 samples.
    while len(h.series) < 3 and time.perf_counter() < deadline:
        pass
    h.stop()
    s = h.summary()
    assert s["samples"] >= 3
    assert len(s["cpu_per_core_pct"]) == s["cores"]
    assert s["cpu_max_core_pct"] > 0 and s["ctx_switches_per_s"] > 0
    assert s["disk_read_mb_s"] >= 0 and "nvml" not in s  # no GPU asked for
    with pytest.raises(ValueError, match="interval"):
        HostSampler(interval=0)


@pytest.mark.timeout(60)
def test_task_clock_sees_a_child_process_cpu() -> None:
    """A CPU-bound child process (a loader worker) started after the first sample is
    counted from its start; its CPU and run-queue seconds add up."""
    import subprocess
    import sys

    from feedline.observe._host import TaskClock

    clock = TaskClock()
    clock.sample()
    child = subprocess.Popen([sys.executable, "-c",
                              "import sys, time\nend = time.process_time() + 0.3\n"
                              "while time.process_time() < end: pass\n"
                              "print('spun', flush=True)\nsys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"spun\n"
        cpu, runq = clock.sample()
        assert 0.3 <= cpu < 5.0 and runq >= 0.0
        again, _ = clock.sample()
        assert again < 0.1  # counted once: the next sample has only what it did since
    finally:
        child.communicate(b"", timeout=30)


def test_the_sampled_gpu_is_the_one_the_run_computes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML numbers every GPU of the host; CUDA only the visible ones: rank 1 of a launch on
    CUDA_VISIBLE_DEVICES=4,5 samples NVML GPU 5, not 0."""
    import torch

    from feedline.observe._host import cuda_ordinal, nvml_target

    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert [cuda_ordinal(d) for d in ("cuda", "cuda:3", 2, torch.device("cuda", 1))] == [0, 3, 2, 1]
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert cuda_ordinal("cuda") == 1 and cuda_ordinal("cuda:0") == 0
    assert nvml_target(1, None) == ("index", 1)
    assert nvml_target(1, "4,5") == ("index", 5)
    assert nvml_target(0, "GPU-8a1b,3") == ("uuid", "GPU-8a1b")
    assert nvml_target(2, "4,5") is None  # not visible to this process
    assert nvml_target(1, "0,,1") is None  # CUDA stops at the first empty entry
    assert nvml_target(0, "MIG-1234") is None and nvml_target(0, "") is None
