import pytest

from feedline.model import analyze
from feedline.model.distributions import LogNormal
from feedline.model.plan import meets, plan_pipeline
from feedline.model.simulate import simulate


def test_constant_times_plan_matches_workers_needed():
    plan = plan_pipeline(0.030, 0.050, 0.005, 0.020, max_stall=0.01)
    assert plan is not None
    assert plan.workers == analyze(0.030, 0.050, 0.005, 0.020).workers_needed == 4
    assert plan.prefetch == 1 and plan.result.data_stall == 0.0


def test_heavy_tail_needs_more_than_the_mean_suggests_and_is_minimal():
    read = LogNormal(0.012, 1.0)
    by_mean = analyze(read.mean, 0.008, 0.005, 0.020).workers_needed
    plan = plan_pipeline(read, 0.008, 0.005, 0.020, max_stall=0.02, steps=4000)
    assert plan is not None and meets(plan.result, 0.02)
    assert plan.result.stall_p99 <= 0.02 and plan.result.data_stall <= 0.02
    assert (plan.workers, plan.prefetch) > (by_mean, 1)
    # Minimal: one worker fewer fails at any depth; one batch shallower fails.
    if plan.workers > 1:
        fewer = simulate(read, 0.008, 0.005, 0.020, workers=plan.workers - 1, prefetch=8, steps=4000)
        assert not meets(fewer, 0.02)
    if plan.prefetch > 1:
        shallower = simulate(
            read, 0.008, 0.005, 0.020, workers=plan.workers, prefetch=plan.prefetch - 1, steps=4000
        )
        assert not meets(shallower, 0.02)


def test_copy_bound_pipeline_has_no_plan():
    # h2d (30 ms) slower than the GPU step (20 ms): a third of every step stalls.
    assert plan_pipeline(0.01, 0.01, 0.030, 0.020, max_workers=4, max_prefetch=2) is None


def test_plan_to_dict():
    plan = plan_pipeline(0.012, 0.008, 0.005, 0.020)
    assert plan is not None
    d = plan.to_dict()
    assert d["workers"] == 1 and d["result"]["gpu_busy"] == 1.0


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"max_stall": -0.1}, "max_stall"),
        ({"max_stall": 1.5}, "max_stall"),
        ({"max_stall": float("nan")}, "max_stall"),
        ({"max_workers": 0}, "max_workers"),
        ({"max_prefetch": 0}, "max_prefetch"),
    ],
)
def test_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        plan_pipeline(0.01, 0.01, 0.01, 0.01, **kwargs)
