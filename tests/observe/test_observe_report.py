from __future__ import annotations

import pytest

from feedline.observe._stats import Span
from feedline.observe.report import Measurements, build_report


def meas(wait: float, body: float, fetch: float, cpu: float, workers: int | None,
         n: int = 20, **kw: object) -> Measurements:
    spans = [Span("fetch", i, i + fetch, 1, 1, {"cpu": cpu, "runq": 0.0}) for i in range(n)]
    loader = {} if workers is None else {"num_workers": workers, "batch_size": 8}
    return Measurements(name="m", device_type="cpu", wait=[wait] * n, body=[body] * n,
                        gpu=[body] * n, spans=spans, loader=loader, cores=8, gpus=1, **kw)  # type: ignore[arg-type]


def test_serial_io_bound_run() -> None:
    rep = build_report(meas(wait=0.030, body=0.010, fetch=0.030, cpu=0.001, workers=0))
    assert rep.verdict == "data-bound" and rep.binding == "read"
    assert rep.stall_fraction == pytest.approx(0.75)
    assert rep.analysis["applies"] == "serial"
    assert rep.analysis["predicted"] == pytest.approx(0.040)
    # 3 workers hide 30 ms of reads behind a 10 ms step: 40 ms -> 10 ms
    assert rep.predicted_gain == pytest.approx(4.0)
    assert "num_workers=3" in rep.recommendation


def test_serial_cpu_bound_run_binds_on_decode() -> None:
    rep = build_report(meas(wait=0.030, body=0.010, fetch=0.030, cpu=0.028, workers=0))
    assert rep.verdict == "data-bound" and rep.binding == "decode"


def test_compute_bound_pipelined_run() -> None:
    rep = build_report(meas(wait=0.001, body=0.040, fetch=0.010, cpu=0.009, workers=2))
    assert rep.verdict == "compute-bound" and rep.binding == "gpu"
    assert rep.analysis["applies"] == "steady"
    assert rep.analysis["predicted"] == pytest.approx(0.040)
    assert rep.predicted_gain == 1.0


def test_balanced_when_the_data_path_needs_most_of_the_step() -> None:
    rep = build_report(meas(wait=0.002, body=0.020, fetch=0.036, cpu=0.030, workers=2))
    assert rep.verdict == "balanced"


def test_synthetic_batch_check_decides_an_unclear_run() -> None:
    ab = {"steps": 8, "with_data_path": 0.03, "without_data_path": 0.015, "ratio": 2.0}
    rep = build_report(meas(wait=0.004, body=0.020, fetch=0.036, cpu=0.030, workers=2, ab=ab))
    assert rep.verdict == "data-bound"


def test_empty_run_does_not_crash() -> None:
    rep = build_report(Measurements(name="e", device_type="cpu", wait=[], body=[], gpu=[], spans=[]))
    assert rep.steps == 0 and rep.stall_fraction == 0.0
    d = rep.to_dict()
    assert d["verdict"] == "unknown" and d["binding"] == "unknown"  # never a default verdict
    assert "step" in d["reason"] and "--steps" in d["fix"]


def test_cpu_queueing_inside_the_wait_is_not_a_data_stall() -> None:
    m = meas(wait=0.010, body=0.040, fetch=0.004, cpu=0.003, workers=2)
    m.wait_runq = [0.009] * len(m.wait)
    rep = build_report(m)
    assert rep.stall_fraction == pytest.approx(0.001 / 0.050)
    assert rep.verdict == "compute-bound"
    assert "host-contention" in {f.code for f in rep.findings}


def test_cuda_step_lasts_as_long_as_its_device_work_when_the_host_runs_ahead() -> None:
    n = 10
    m = Measurements(name="g", device_type="cuda", wait=[0.0005] * n, body=[0.001] * n,
                     gpu=[0.050] * n, spans=[], loader={"num_workers": 4}, cores=16, gpus=1)
    rep = build_report(m)
    assert rep.step_time.p50 == pytest.approx(0.050)
    assert rep.verdict == "compute-bound" and rep.gpu_utilisation == pytest.approx(1.0)
    assert rep.stall_fraction == pytest.approx(0.0005 / 0.050)


def test_sampled_run_queue_delay_is_scaled_to_the_unsampled_fetches() -> None:
    # 30 ms fetches: 10 ms of CPU and 15 ms queued for a core, i.e. a CPU-bound
    # decode on a busy host. Only every 4th fetch carries its measured delay.
    n = 20
    spans = [Span("fetch", i, i + 0.030, 1, 1, {"cpu": 0.010} | ({"runq": 0.015} if i % 4 == 0 else {}))
             for i in range(n)]
    m = Measurements(name="s", device_type="cpu", wait=[0.030] * n, body=[0.010] * n,
                     gpu=[0.010] * n, spans=spans, loader={"num_workers": 0}, cores=8, gpus=1)
    sampled_all = [Span(s.stage, s.start, s.end, 1, 1, {"cpu": 0.010, "runq": 0.015}) for s in spans]
    full = Measurements(name="f", device_type="cpu", wait=m.wait, body=m.body, gpu=m.gpu,
                        spans=sampled_all, loader=m.loader, cores=8, gpus=1)
    got, want = build_report(m), build_report(full)
    assert got.binding == want.binding == "decode"
    assert got.analysis["decode"] == pytest.approx(want.analysis["decode"])
    assert got.analysis["read"] == pytest.approx(want.analysis["read"])
