from __future__ import annotations

import pytest

from feedline.observe._stats import Span
from feedline.observe.report import Measurements, Report, build_report


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
    # 3 workers hide 30 ms of reads behind a 10 ms step, 4 with a quarter of headroom:
    # 40 ms -> 10 ms; 97% of each fetch is blocked, so 8 cores carry far more workers
    assert rep.predicted_gain == pytest.approx(4.0)
    assert "num_workers=4" in rep.recommendation and "pin_memory" not in rep.recommendation
    assert "workers-above-cores" not in {f.code for f in rep.findings}


def test_io_bound_workers_may_exceed_the_cores_cpu_bound_may_not() -> None:
    io = build_report(meas(wait=0.060, body=0.010, fetch=0.060, cpu=0.003, workers=1))
    assert "num_workers=8" in io.recommendation  # ceil(1.25 x 60 / 10) = 8, within 8 / 0.05
    few = build_report(Measurements(**{**vars(meas(wait=0.060, body=0.010, fetch=0.060,
                                                        cpu=0.003, workers=1)), "cores": 2}))
    assert "num_workers=8" in few.recommendation  # blocked workers hold no core: 8 > 2 cores
    cpu = build_report(Measurements(**{**vars(meas(wait=0.060, body=0.010, fetch=0.060,
                                                        cpu=0.058, workers=1)), "cores": 2}))
    assert "num_workers=2" in cpu.recommendation  # CPU work: one worker per core at most


def test_workers_are_sized_for_the_typical_step_not_a_slow_start() -> None:
    # 8 steps of 40 ms (a warm-up), then 40 of 3 ms, against 24 ms of reads a batch: the
    # mean step (9 ms) would size 4 workers; hiding 24 ms behind 3 ms takes 10 (x 1.25)
    m = meas(wait=0.021, body=0.003, fetch=0.024, cpu=0.001, workers=1, n=48)
    body = [0.040] * 8 + [0.003] * 40
    drift = build_report(Measurements(**{**vars(m), "body": body, "gpu": body}))
    assert drift.verdict == "data-bound" and "num_workers=10," in drift.recommendation


def test_tail_stalls_get_a_prefetch_depth_from_the_measured_tail() -> None:
    n = 64
    spans = [Span("fetch", i, i + (0.200 if i % 16 == 0 else 0.001), 1, 1,
                  {"cpu": 0.0005, "runq": 0.0}) for i in range(n)]
    waits = [0.150 if i % 16 == 1 else 0.0005 for i in range(n)]
    rep = build_report(Measurements(name="t", device_type="cpu", wait=waits, body=[0.020] * n,
                                    gpu=[0.020] * n, spans=spans, cores=2,
                                    loader={"num_workers": 2, "batch_size": 8}))
    # p99 preparation 200 ms against a 20 ms step: 10 batches ready, 5 per worker, + 1
    assert "prefetch_factor=6" in rep.recommendation
    assert "prefetch_factor=6" in next(f.fix for f in rep.findings if f.code == "tail-stalls")


def test_gil_bound_thread_workers_are_told_to_use_processes() -> None:
    spans = [Span("transform", i * 0.02, i * 0.02 + 0.015, 1, 2, {"cpu": 0.004}) for i in range(30)]
    rep = build_report(Measurements(
        name="g", device_type="cpu", wait=[0.001] * 30, body=[0.030] * 30, gpu=[0.030] * 30,
        spans=spans, cores=2, host={"gil_wait_ms": 8.0},
        loader={"num_workers": 4, "worker_type": "thread", "feedline": True, "batch_size": 8}))
    assert rep.verdict == "data-bound" and rep.binding == "transform" and "GIL" in rep.reason
    assert 'worker_type="process"' in rep.recommendation
    assert "feedline.Loader" not in rep.recommendation + str(rep.findings)
    assert "gil-bound-threads" in {f.code for f in rep.findings}


@pytest.mark.parametrize("kind", ["thread", "process"])
def test_an_auto_loader_is_read_as_the_kind_it_chose(kind: str) -> None:
    """worker_type="auto": threads are modelled as threads (GIL) only when it runs on them."""
    spans = [Span("transform", i * 0.02, i * 0.02 + 0.015, 1, 2, {"cpu": 0.004}) for i in range(30)]
    rep = build_report(Measurements(
        name="g", device_type="cpu", wait=[0.001] * 30, body=[0.030] * 30, gpu=[0.030] * 30,
        spans=spans, cores=2, host={"gil_wait_ms": 8.0},
        loader={"num_workers": 4, "worker_type": "auto", "worker_kind": kind, "feedline": True,
                "batch_size": 8}))
    assert ("gil-bound-threads" in {f.code for f in rep.findings}) == (kind == "thread")



def test_serial_cpu_bound_run_binds_on_decode() -> None:
    rep = build_report(meas(wait=0.030, body=0.010, fetch=0.030, cpu=0.028, workers=0))
    assert rep.verdict == "data-bound" and rep.binding == "decode"


def test_compute_bound_pipelined_run() -> None:
    rep = build_report(meas(wait=0.001, body=0.040, fetch=0.010, cpu=0.009, workers=2))
    assert rep.verdict == "compute-bound" and rep.binding == "gpu"
    assert rep.analysis["applies"] == "steady"
    # the steady step, plus taking a ready batch (the floor of the waits) once per step
    assert rep.analysis["receive"] == pytest.approx(0.001)
    assert rep.analysis["predicted"] == pytest.approx(0.040 + 0.001)
    assert rep.analysis["predicted"] == pytest.approx(rep.step_time.mean)
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


def test_loader_stage_queued_for_a_core_is_cpu_not_read() -> None:
    # A Loader transform of 10 ms CPU that took 30 ms on a busy host: its threads waited
    # 2 s for a core per CPU second (host sampler). That wait is CPU demand, not I/O.
    n = 20
    spans = [Span("transform", i, i + 0.030, 1, 2, {"cpu": 0.010}) for i in range(n)]
    loader = {"num_workers": 1, "worker_type": "process", "feedline": True, "batch_size": 8}
    m = Measurements(name="q", device_type="cpu", wait=[0.025] * n, body=[0.005] * n,
                     gpu=[0.005] * n, spans=spans, cores=2, loader=loader,
                     host={"loader_runq_per_cpu": 2.0})
    rep = build_report(m)
    assert rep.binding == "transform"
    assert rep.analysis["per_batch"]["transform"] == pytest.approx(0.030)
    assert "worker_type='process'" in rep.recommendation  # the user's worker type kept
    quiet = build_report(Measurements(**{**vars(m), "host": {}}))
    assert quiet.binding == "read"  # without the measured queueing it looks blocked


def test_worker_start_up_at_each_new_iterator_binds_as_startup() -> None:
    # next(iter(loader)) every step: each step is a new pass whose first wait is the
    # workers' start-up (200 ms) while a batch costs 1 ms to prepare
    n = 20
    spans = [Span("fetch", i, i + 0.001, 1, 1, {"cpu": 0.0008, "runq": 0.0}) for i in range(n)]
    spans += [Span("collate", i + 0.001, i + 0.004, 1, 1, {}) for i in range(n)]
    m = Measurements(name="n", device_type="cpu", wait=[0.200] * n, body=[0.010] * n,
                     gpu=[0.010] * n, spans=spans, cores=2, pass_first=list(range(1, n)),
                     loader={"num_workers": 2, "batch_size": 16, "persistent_workers": False})
    rep = build_report(m)
    assert rep.verdict == "data-bound" and rep.binding == "startup"
    assert "it = iter(loader)" in rep.recommendation and "persistent_workers=True" in rep.recommendation
    (f,) = [f for f in rep.findings if f.code == "epoch-restarts"]
    assert "new iterator every step" in f.message
    # an epoch of 10 steps with a slow start: still start-up, said as epochs
    every10 = build_report(Measurements(**{**vars(m), "pass_first": [10]}))
    assert "first batch of each epoch" in every10.recommendation or every10.binding != "startup"
    # persistent workers do not restart: the per-batch stages decide
    kept = build_report(Measurements(**{**vars(m), "loader": m.loader | {"persistent_workers": True}}))
    assert kept.binding != "startup"


def test_advice_keeps_batch_size_none_and_the_start_method() -> None:
    from feedline.observe.findings import loader_call

    call = loader_call({"type": "DataLoader", "batch_size": None, "num_workers": 0}, 2, False)
    assert call == "DataLoader(dataset, batch_size=None, num_workers=2, persistent_workers=True)"
    fs = loader_call({"batch_size": 8, "num_workers": 1, "start_method": "forkserver"}, 2, False)
    assert "multiprocessing_context='forkserver'" in fs


def test_a_step_queued_for_a_core_gets_the_step_contention_finding() -> None:
    m = meas(wait=0.001, body=0.030, fetch=0.002, cpu=0.001, workers=2)
    m.loader["torch_threads"] = 2
    m.body_runq = [0.018] * len(m.body)  # 60% of each body waiting for a core
    (f,) = [f for f in build_report(m).findings if f.code == "step-contention"]
    assert "60%" in f.message and "2 intra-op threads" in f.message
    assert "torch.set_num_threads(6)" in f.fix  # 8 cores, 2 workers
    rep = build_report(m)  # compute-bound: the headline says the same, not mixed precision
    assert rep.verdict == "compute-bound" and "waited 60% of its time for a CPU core" in rep.recommendation
    assert "torch.set_num_threads(6)" in rep.recommendation
    # torch already runs the 6 threads the workers leave: the advice is what else helps
    m.loader["torch_threads"] = 6
    (f,) = [f for f in build_report(m).findings if f.code == "step-contention"]
    assert "6 intra-op threads" in f.message and "set_num_threads" not in f.fix and "fewer workers" in f.fix
    assert "set_num_threads" not in build_report(m).recommendation
    m.loader["torch_threads"], m.loader["num_workers"] = 1, 7  # singular words for one of each
    (f,) = [f for f in build_report(m).findings if f.code == "step-contention"]
    assert "1 intra-op thread, 7 loader workers" in f.message and "set_num_threads" not in f.fix
    m.body_runq = [0.001] * len(m.body)
    assert "step-contention" not in {f.code for f in build_report(m).findings}
    assert "mixed precision" in build_report(m).recommendation


def test_the_step_contention_share_never_passes_the_whole_body() -> None:
    # a run-queue reading spans a step's whole interval; its body may be shorter (another
    # loader's pass taken out): the share is of the body, 100% at most
    m = meas(wait=0.001, body=0.030, fetch=0.002, cpu=0.001, workers=2)
    m.body_runq = [0.045] * len(m.body)
    (f,) = [f for f in build_report(m).findings if f.code == "step-contention"]
    assert "waited 100% of its step body" in f.message, f.message


def test_a_first_pass_read_from_storage_and_later_ones_from_a_cache_are_both_said() -> None:
    # epoch 1 waits 48 ms per 10 ms step, epochs 2 and 3 read from a cache
    n, waits = 36, [0.048] * 12 + [0.0005] * 24
    spans = [Span("fetch", i, i + w, 1, 1, {"cpu": 0.0002, "runq": 0.0}) for i, w in enumerate(waits)]
    rep = build_report(Measurements(name="c", device_type="cpu", wait=waits, body=[0.010] * n,
                                    gpu=[0.010] * n, spans=spans, cores=2, pass_first=[12, 24],
                                    loader={"num_workers": 0, "batch_size": 8}))
    first, *later = rep.analysis["pass_stalls"]
    assert len(later) == 2 and first > 0.7 and max(later) < 0.1
    codes = {f.code for f in rep.findings}
    assert "passes-differ" in codes and "tail-stalls" not in codes


def test_a_loader_rebuilt_each_epoch_restarts_its_workers_even_if_persistent() -> None:
    n = 20
    spans = [Span("fetch", i, i + 0.001, 1, 1, {"cpu": 0.0008, "runq": 0.0}) for i in range(n)]
    waits = [0.300 if i in (5, 10, 15) else 0.001 for i in range(n)]  # each epoch's first batch
    loader = {"num_workers": 2, "batch_size": 16, "persistent_workers": True, "instances": 4}
    rep = build_report(Measurements(name="r", device_type="cpu", wait=waits, body=[0.010] * n,
                                    gpu=[0.010] * n, spans=spans, cores=2, loader=loader,
                                    pass_first=[5, 10, 15]))
    (f,) = [f for f in rep.findings if f.code == "epoch-restarts"]
    assert "built again 3 time(s)" in f.message and "before the epoch loop" in f.fix


def loader_reads(n: int, wall: float, cpu: float, threads: int, host: dict,
                 body: float = 0.030, body_runq: float = 0.0) -> Measurements:
    """A feedline.Loader with ``threads`` thread workers whose read stage (the dataset's
    ``__getitem__``) takes ``wall`` per batch, ``cpu`` of it on the CPU; a 2-core host."""
    spans = [Span("read", i * 0.010, i * 0.010 + wall, 1, 2, {"cpu": cpu, "batch": i})
             for i in range(n)]
    return Measurements(
        name="r", device_type="cpu", wait=[0.002] * n, body=[body] * n, gpu=[body] * n,
        spans=spans, cores=2, host=host, body_runq=[body_runq] * n,
        loader={"num_workers": threads, "worker_type": "thread", "feedline": True,
                "batch_size": 8})


def test_cpu_in_the_loaders_item_code_is_decode_and_blocked_time_read() -> None:
    # the same split as a DataLoader fetch: CPU seconds are decode, the rest read
    cpu = build_report(loader_reads(30, 0.040, 0.036, 1, {}, body=0.005))
    assert cpu.verdict == "data-bound" and cpu.binding == "decode"
    assert cpu.analysis["per_batch"]["decode"] == pytest.approx(0.036)
    io = build_report(loader_reads(30, 0.040, 0.001, 1, {}, body=0.005))
    assert io.verdict == "data-bound" and io.binding == "read"


def test_an_external_decoders_cpu_is_decode_with_its_wait_for_a_core() -> None:
    # each fetch waits 60 ms for child decoders that used 20 ms of CPU on a host where
    # the loader's processes wait 2 s for a core per CPU second: all of it is decode, and
    # no more workers than cores; without the children's CPU it would be a blocked read
    def run(child: float) -> Report:
        spans = [Span("fetch", i * 0.1, i * 0.1 + 0.060, 1, 1,
                      {"cpu": 0.0005, "runq": 0.0} | ({"child_cpu": child} if child else {}))
                 for i in range(30)]
        return build_report(Measurements(
            name="r", device_type="cpu", wait=[0.050] * 30, body=[0.005] * 30,
            gpu=[0.005] * 30, spans=spans, cores=2, host={"loader_runq_per_cpu": 2.0},
            loader={"num_workers": 2, "batch_size": 4}))

    rep = run(0.020)
    assert rep.verdict == "data-bound" and rep.binding == "decode"
    assert rep.analysis["per_batch"]["decode"] == pytest.approx(0.060)
    assert rep.analysis["blocked_fraction"] < 0.1
    assert run(0.0).binding == "read"


def test_gil_bound_item_code_binds_on_decode_with_its_cpu_as_stall() -> None:
    # 4 threads take turns under the GIL: each batch's read is 160 ms of wall for 40 ms of
    # CPU (the rest waiting for the GIL); the training thread's 45 ms step hides the stall
    rep = build_report(loader_reads(30, 0.160, 0.040, 4, {"gil_wait_ms": 4.0}, body=0.045))
    assert rep.verdict == "data-bound" and rep.binding == "decode" and "GIL" in rep.reason
    assert rep.stall_fraction == pytest.approx(0.040 / 0.047, abs=0.01)
    assert 'worker_type="process"' in rep.recommendation
    from feedline.observe._export import render_text

    text = " ".join(render_text(rep).split())  # 85% stall beside a step busy 96%: not a contradiction
    assert "of each step (part of it inside the step: see why) busy:" in text and "why decode:" in text
    plain = build_report(loader_reads(30, 0.040, 0.001, 1, {}, body=0.005))
    assert "inside the step" not in render_text(plain)


def test_thread_workers_crowding_the_training_thread_off_its_cores() -> None:
    # no GIL wait measured (numpy drops it often), but the thread workers keep the cores
    # busy (2 s queued for a core per CPU second): the training thread waits half its step
    host = {"gil_wait_ms": 1.0, "loader_runq_per_cpu": 2.0}
    rep = build_report(loader_reads(30, 0.120, 0.040, 4, host, body=0.030, body_runq=0.015))
    assert rep.verdict == "data-bound" and rep.binding == "decode"
    assert "waited 50% of its step for a core" in rep.reason
    assert rep.stall_fraction == pytest.approx(0.040 / 2 / 0.032, abs=0.01)
    # processes would take the same cores: the advice is the CPU path's, not processes
    assert "cut per-sample cost" in rep.recommendation and "process" not in rep.recommendation
    # without the step contention the thread workers crowd nothing: no data time hidden
    calm = build_report(loader_reads(30, 0.120, 0.040, 4, host, body=0.030))
    assert calm.verdict == "balanced" and calm.stall_fraction < 0.1
    # a little CPU per batch beside a long step: contended, but not data-bound
    light = build_report(loader_reads(30, 0.024, 0.008, 4, host, body=0.100, body_runq=0.050))
    assert light.verdict != "data-bound" and light.stall_fraction < 0.1


def test_a_thread_that_only_hands_batches_on_is_said_and_predicts_no_gain() -> None:
    # a ThreadPoolExecutor thread calls next(it) and returns: 0.5 ms between batches
    # against 40 ms of waiting; the trainer's 8 ms step runs on another thread, unseen
    m = meas(wait=0.040, body=0.0005, fetch=0.040, cpu=0.001, workers=1)
    rep = build_report(Measurements(**{**vars(m), "loader": m.loader | {"consumer": "thread"}}))
    assert rep.verdict == "data-bound" and rep.predicted_gain is None
    (f,) = [f for f in rep.findings if f.code == "handoff-consumer"]
    assert "feedline.watch" in f.fix
    # the same figures on the main thread (a loop doing next to nothing) are taken as they are
    main = build_report(Measurements(**{**vars(m), "loader": m.loader | {"consumer": "main"}}))
    assert "handoff-consumer" not in {f.code for f in main.findings}
    assert main.predicted_gain is not None


def test_advice_keeps_how_the_loader_draws_and_batches() -> None:
    import functools

    import torch
    from torch.utils.data import (
        BatchSampler,
        DataLoader,
        SequentialSampler,
        TensorDataset,
        WeightedRandomSampler,
    )

    from feedline.observe._clock import loader_config
    from feedline.observe.findings import loader_call

    ds = TensorDataset(torch.zeros(12, 2))

    def pad(rows: list) -> list:
        return rows

    buckets = DataLoader(ds, batch_sampler=BatchSampler(SequentialSampler(ds), 4, False),
                         collate_fn=pad)
    call = loader_call(loader_config(buckets), 2, False)
    # batch_sampler= excludes batch_size= (DataLoader raises on both); the collate is kept
    assert call.startswith("DataLoader(dataset, batch_sampler=BatchSampler(...), collate_fn=pad,")
    assert "batch_size" not in call
    weighted = DataLoader(ds, batch_size=4, sampler=WeightedRandomSampler([1.0] * 12, 12),
                          collate_fn=functools.partial(pad))
    call = loader_call(loader_config(weighted), 2, False)
    assert "sampler=WeightedRandomSampler(...)" in call and "functools.partial(pad" in call
    shuffled = loader_call(loader_config(DataLoader(ds, batch_size=4, shuffle=True,
                                                    drop_last=True)), 2, False)
    assert shuffled == ("DataLoader(dataset, batch_size=4, shuffle=True, drop_last=True, "
                        "num_workers=2, persistent_workers=True)")
    plain = loader_call(loader_config(DataLoader(ds, batch_size=4)), 2, False)
    assert plain == "DataLoader(dataset, batch_size=4, num_workers=2, persistent_workers=True)"


def test_advice_at_the_core_count_cuts_the_binding_stage() -> None:
    # CPU decode in as many workers as cores: more workers cannot help; what to cut is the
    # decode, not the reads (no "pack small files" for data that is one mapped file)
    dec = build_report(Measurements(**{**vars(meas(wait=0.030, body=0.003, fetch=0.064,
                                                        cpu=0.063, workers=2)), "cores": 2}))
    assert dec.binding == "decode" and "cheaper decode" in dec.recommendation
    assert "pack small files" not in dec.recommendation
    # a collate that binds in DataLoader workers already runs there: not "move it to them"
    n = 20
    spans = [Span(stage, i, i + d, 1, 1, {"cpu": d, "runq": 0.0}) for i in range(n)
             for stage, d in (("fetch", 0.001), ("collate", 0.060))]
    col = build_report(Measurements(name="c", device_type="cpu", wait=[0.025] * n,
                                    body=[0.004] * n, gpu=[0.004] * n, spans=spans, cores=2,
                                    loader={"num_workers": 2, "batch_size": 32}))
    assert col.binding == "collate", col.recommendation
    assert "already runs in the 2 worker(s)" in col.recommendation
    assert "which workers share" not in col.recommendation


def test_a_loader_in_lockstep_with_the_training_one_is_training_data() -> None:
    from feedline.observe.report import other_loader

    kw = {"config": {"type": "DataLoader", "num_workers": 0}, "waits": [0.0002] * 20,
          "bodies": [0.012] * 20, "passes": [(0.0, 0.25)], "spans": [], "wall": 0.3,
          "cores": 2, "cuda": False}
    task = other_loader("loader-1", **kw, lockstep_with="loader-3")  # type: ignore[arg-type]
    assert task["role"] == "lockstep" and "evaluation" not in task["advice"]
    assert "lockstep with loader-3" in task["advice"]
    val = other_loader("loader-2", **kw)  # type: ignore[arg-type]
    assert val["role"] == "other" and "evaluation compute" in val["advice"]


def test_text_names_the_binding_stage_the_table_lacks() -> None:
    """A DataLoader fetch is one table row; the model splits it into blocked ``read`` and CPU
    ``decode``, and the verdict's binding stage must be a name the text shows."""
    from feedline.observe._export import render_text

    m = Measurements(**{**vars(meas(wait=0.060, body=0.010, fetch=0.060, cpu=0.040, workers=1)), "cores": 2})
    rep = build_report(m)
    assert rep.binding == "decode" and "decode" not in rep.stages
    text = " ".join(render_text(rep).split())
    assert "binding: decode" in text
    assert "per batch (read = time blocked, decode = CPU time of the data code): read 20.00 ms, decode 40.00 ms" in text


def test_a_save_every_n_steps_is_named_as_periodic_work_not_data() -> None:
    # an in-memory loader, 15 ms steps, and every 10th step 80 ms longer (a torch.save):
    # compute-bound, and the saves (a third of the time) are named before "speed up the step"
    n = 60
    body = [0.095 if i % 10 == 9 else 0.015 for i in range(n)]
    m = meas(wait=0.0004, body=0.015, fetch=0.0003, cpu=0.0003, workers=0, n=n)
    rep = build_report(Measurements(**{**vars(m), "body": body, "gpu": body}))
    assert rep.verdict == "compute-bound"
    (f,) = [f for f in rep.findings if f.code == "long-steps"]
    assert "6 of 59 steps took 95 ms" in f.message and "once every 10 steps" in f.message
    assert "periodic work" in f.message and "background thread" in f.fix
    assert rep.recommendation.index("once every 10 steps") < rep.recommendation.index(
        "speed up the step")
    # the same long bodies spent queued for a CPU core (a busy host) are no work in the loop
    queued = [0.080 if i % 10 == 9 else 0.0 for i in range(n)]
    busy = build_report(Measurements(**{**vars(m), "body": body, "gpu": body,
                                        "body_runq": queued}))
    assert "long-steps" not in {f.code for f in busy.findings}
    # a slow start (8 steps) is named without a period; steady steps say nothing
    drift = [0.040] * 8 + [0.003] * 40
    m48 = meas(wait=0.021, body=0.003, fetch=0.024, cpu=0.001, workers=1, n=48)
    slow = build_report(Measurements(**{**vars(m48), "body": drift, "gpu": drift}))
    (f,) = [f for f in slow.findings if f.code == "long-steps"]
    assert "a slow phase" in f.message and "once every" not in f.message
    assert "make that work rarer" not in slow.recommendation
    steady = [0.015 + 0.001 * (i % 3) for i in range(n)]
    plain = build_report(Measurements(**{**vars(m), "body": steady, "gpu": steady}))
    assert "long-steps" not in {f.code for f in plain.findings}
    assert "once every" not in plain.recommendation


def test_no_loader_at_all_and_a_loader_with_no_batch_are_told_apart() -> None:
    import time

    from feedline.observe._session import Session

    # an RL loop or the user's own generator: nothing iterated a loader
    none = Session("rl", "cpu").start().report().to_dict()
    assert none["verdict"] == "unknown" and "its own code" in none["reason"]
    assert "feedline.watch(batches)" in none["fix"]
    # a loader iterated (a pass begun) that yielded nothing
    session = Session("empty", "cpu").start()
    now = time.perf_counter()
    session.clocks.on_iter(object(), now, now)
    empty = session.report().to_dict()
    assert empty["verdict"] == "unknown" and "yielded no batch" in empty["reason"]
    assert "yields batches" in empty["fix"]


def test_one_slow_shard_of_an_iterable_dataset_is_named_not_more_workers() -> None:
    """A real DataLoader over an IterableDataset whose shard 3 is slow: the worker that
    streams it is named, and the advice is to split the shard, not to add workers (which
    would leave shard 3 to one worker all the same)."""
    import torch
    from obsdata import Shards
    from torch.utils.data import DataLoader

    from feedline.observe._session import Session

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    session = Session("shards", "cpu").start()
    try:
        for x in DataLoader(Shards(records=12), batch_size=4, num_workers=2):
            loss = model(x).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        session.stop()
    rep = session.report()
    wid, slow_s, median_s = rep.analysis["uneven_worker"]
    assert wid == 1 and slow_s > 3 * median_s  # worker 1 reads shards 1 and 3
    assert "more workers would not split it" in rep.recommendation
    assert "num_workers=" not in rep.recommendation


def test_each_workers_first_batch_of_the_first_pass_is_warm_up() -> None:
    # 3 spawned workers: step 0 waits for the first one (warm-up), steps 1 and 2 for the
    # others' start (0.5 s each, an import and a connection); then the data keeps up
    m = meas(wait=0.001, body=0.030, fetch=0.001, cpu=0.001, workers=3, n=24)
    m.wait[:3] = [0.6, 0.5, 0.5]
    rep = build_report(m)
    assert rep.verdict == "compute-bound" and rep.stall_fraction < 0.05
    # later in the run the same waits are stalls
    late = meas(wait=0.001, body=0.030, fetch=0.001, cpu=0.001, workers=3, n=24)
    late.wait[10:12] = [0.5, 0.5]
    assert build_report(late).stall_fraction > 0.5


def test_the_data_paths_cpu_sizes_the_workers_worth_it_needs() -> None:
    # 40 ms of decode CPU a batch, its fetch 4x longer queued for a core on a busy host:
    # 10 workers' worth of a 4 ms step, not the 40 its wall time says
    m = meas(wait=0.080, body=0.004, fetch=0.160, cpu=0.040, workers=2, n=24)
    m.spans = [Span("fetch", i, i + 0.160, 1, 1, {"cpu": 0.040, "runq": 0.120}) for i in range(24)]
    m.cores = 2
    rep = build_report(m)
    assert rep.verdict == "data-bound" and rep.binding == "decode"
    assert "needs 10 workers' worth of decode on 2 cores" in rep.recommendation, rep.recommendation


def test_augmentation_in_the_loop_binds_over_worker_restarts() -> None:
    # 30 ms of the 40 ms body is the loop's own work on the batch before the forward; the
    # second epoch's worker restart waits 0.6 s: most of the waits, not of the stall
    m = meas(wait=0.001, body=0.040, fetch=0.001, cpu=0.001, workers=2, n=40)
    m.pass_first, m.wait[20:22] = [20], [0.3, 0.3]
    m.spans += [Span("loop_transform", i + 0.5, i + 0.53, 1, 1, {}) for i in range(40)]
    rep = build_report(m)
    assert rep.verdict == "data-bound" and rep.binding == "loop_transform"
    assert rep.analysis["per_batch"]["loop_transform"] == pytest.approx(0.030)
    assert rep.analysis["per_batch"]["gpu"] == pytest.approx(0.010)
