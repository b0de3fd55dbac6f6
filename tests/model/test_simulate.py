import itertools
import json
import math
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from feedline.model import analyze
from feedline.model.distributions import Empirical, LogNormal
from feedline.model.simulate import simulate

GRID = list(
    itertools.product(
        [0.0, 0.004, 0.012, 0.050],  # read
        [0.0, 0.008, 0.030],  # decode
        [0.0, 0.005, 0.025],  # h2d
        [0.001, 0.020, 0.040],  # gpu
        [1, 2, 3, 8],  # workers
    )
)


def test_constant_times_agree_with_analytic_model_over_a_grid():
    worst = 0.0
    for read, decode, h2d, gpu, workers in GRID:
        for prefetch in (1, 2):
            sim = simulate(read, decode, h2d, gpu, workers=workers, prefetch=prefetch, steps=1000)
            a = analyze(read, decode, h2d, gpu, workers=workers)
            err = abs(sim.step_mean - a.steady) / a.steady
            worst = max(worst, err)
            assert err <= 0.01, (read, decode, h2d, gpu, workers, prefetch, sim.step_mean, a.steady)
            assert math.isclose(sim.gpu_busy, a.utilisation_pipelined, rel_tol=0.01, abs_tol=1e-3)
            assert math.isclose(sim.gpu_busy + sim.data_stall, 1.0)
            assert sim.analytic_steady == a.steady
    assert worst <= 0.01


def test_seed_example_is_fully_hidden():
    r = simulate(0.012, 0.008, 0.005, 0.020, workers=1)
    assert r.steps == 10_000
    for v in (r.step_mean, r.step_p50, r.step_p95, r.step_p99, r.step_max):
        assert math.isclose(v, 0.020, rel_tol=1e-9)
    assert r.gpu_busy == 1.0 and r.data_stall == 0.0 and r.stall_p99 == 0.0


def test_data_bound_run_stalls_by_the_analytic_share():
    r = simulate(0.030, 0.050, 0.005, 0.020, workers=2)
    assert math.isclose(r.step_mean, 0.040, rel_tol=1e-6)
    assert math.isclose(r.gpu_busy, 0.5, rel_tol=1e-6)
    assert math.isclose(r.data_stall, 0.5, rel_tol=1e-6)
    # Both workers finish together, so batches arrive in pairs: a 60 ms step
    # (40 ms stall) then a 20 ms one. The mean (40 ms) is a step that never happens.
    assert set(np.round(r.step_times, 9)) == {0.060, 0.020}
    assert math.isclose(r.stall_p99, 40 / 60, rel_tol=1e-6)


def test_single_device_buffer_serialises_copy_and_compute():
    # With one device slot the copy of batch i+1 waits for step i: h2d + gpu per step.
    r = simulate(0.001, 0.001, 0.010, 0.020, workers=4, device_buffers=1)
    assert math.isclose(r.step_mean, 0.030, rel_tol=1e-6)
    assert math.isclose(simulate(0.001, 0.001, 0.010, 0.020, workers=4).step_mean, 0.020, rel_tol=1e-6)


def test_heavy_tailed_reads_show_the_tail_the_mean_hides():
    read = LogNormal(0.004, 1.5)  # mean ~12.3 ms, p99 ~130 ms
    r = simulate(read, 0.008, 0.005, 0.020, workers=2, prefetch=1, seed=3)
    a = analyze(read.mean, 0.008, 0.005, 0.020, workers=2)
    # On the means the model says: GPU-bound, 20 ms steps, 100% busy.
    assert a.binding == "gpu" and a.steady == 0.020 and a.utilisation_pipelined == 1.0
    assert math.isclose(r.step_p50, 0.020, rel_tol=1e-6)  # the typical step looks perfect
    assert r.step_p99 > 2 * 0.020  # ...but one step in a hundred is far slower
    assert r.data_stall > 0.05 and r.stall_p99 > 0.5
    assert r.step_mean < r.step_p99 / 2  # and the mean step hides it


def test_deeper_prefetch_and_more_workers_absorb_the_tail():
    read = LogNormal(0.004, 1.5)
    stalls = [
        simulate(read, 0.008, 0.005, 0.020, workers=w, prefetch=p, seed=3).data_stall
        for w, p in [(2, 1), (2, 4), (4, 4)]
    ]
    assert stalls[0] > stalls[1] > stalls[2]


def test_empirical_constant_sample_matches_constant():
    emp = Empirical.from_values([0.012] * 10)
    assert simulate(emp, 0.008, 0.005, 0.020).step_mean == simulate(0.012, 0.008, 0.005, 0.020).step_mean


def test_seeded_runs_are_reproducible():
    kw = dict(workers=2, prefetch=1, steps=2000)
    a = simulate(LogNormal(0.01, 1.0), 0.008, 0.005, 0.020, seed=7, **kw)
    b = simulate(LogNormal(0.01, 1.0), 0.008, 0.005, 0.020, seed=7, **kw)
    c = simulate(LogNormal(0.01, 1.0), 0.008, 0.005, 0.020, seed=8, **kw)
    assert np.array_equal(a.step_times, b.step_times) and a.to_dict() == b.to_dict()
    assert not np.array_equal(a.step_times, c.step_times)


def test_result_is_json_serialisable_and_counts_steps():
    r = simulate(0.01, 0.01, 0.001, 0.01, steps=50, warmup=5)
    d = json.loads(json.dumps(r.to_dict()))
    assert d["steps"] == 50 and d["warmup"] == 5 and "step_times" not in d
    assert len(r.step_times) == len(r.stall_times) == 50


def test_ten_thousand_steps_well_under_a_second():
    t0 = time.perf_counter()
    simulate(LogNormal(0.012, 0.8), LogNormal(0.008, 0.3), 0.005, 0.020, workers=4, steps=10_000)
    assert time.perf_counter() - t0 < 1.0


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"workers": 0}, "workers"),
        ({"workers": 1.5}, "workers"),
        ({"prefetch": 0}, "prefetch"),
        ({"device_buffers": 0}, "device_buffers"),
        ({"steps": 0}, "steps"),
        ({"warmup": -1}, "warmup"),
    ],
)
def test_bad_counts(kwargs, name):
    with pytest.raises(ValueError, match=name):
        simulate(0.01, 0.01, 0.01, 0.01, **kwargs)


def test_bad_stage_time_names_the_stage():
    with pytest.raises(ValueError, match="h2d"):
        simulate(0.01, 0.01, -0.01, 0.01)
    with pytest.raises(TypeError, match="decode"):
        simulate(0.01, "8ms", 0.01, 0.01)  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(min_value=0.0, max_value=0.1), min_size=4, max_size=4),
    st.floats(min_value=0.001, max_value=0.1),
    st.integers(min_value=1, max_value=12),
    st.integers(min_value=1, max_value=4),
)
def test_constant_times_property(times, gpu, workers, prefetch):
    read, decode, h2d, _ = times
    sim = simulate(read, decode, h2d, gpu, workers=workers, prefetch=prefetch, steps=1500)
    steady = analyze(read, decode, h2d, gpu, workers=workers).steady
    assert abs(sim.step_mean - steady) <= 0.01 * steady
    assert sim.step_p50 >= gpu * (1 - 1e-9)  # no step is shorter than the GPU's work


@settings(max_examples=25, deadline=None)
@given(st.floats(min_value=0.0, max_value=2.0), st.integers(min_value=1, max_value=6), st.integers(0, 2**32 - 1))
def test_random_times_never_beat_the_gpu(sigma, workers, seed):
    r = simulate(LogNormal(0.01, sigma), LogNormal(0.005, sigma), 0.002, LogNormal(0.02, 0.1),
                 workers=workers, steps=500, seed=seed)
    assert np.all(r.step_times >= 0) and np.all(r.stall_times <= r.step_times + 1e-12)
    assert math.isclose(r.gpu_busy + r.data_stall, 1.0)
    assert r.step_p50 <= r.step_p95 <= r.step_p99 <= r.step_max


def test_counts_past_what_memory_holds_are_refused():
    from feedline.model.simulate import MAX_STEPS

    with pytest.raises(ValueError, match="steps must be at most"):
        simulate(0.001, 0.001, 0.001, 0.001, steps=10**10)
    with pytest.raises(ValueError, match="workers must be at most"):
        simulate(0.001, 0.001, 0.001, 0.001, workers=MAX_STEPS + 1, steps=10)
