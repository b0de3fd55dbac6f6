import math

import pytest

from feedline.model import analyze, pipeline_times, workers_needed


def test_seed_assertions_hold_exactly():
    assert pipeline_times([0.012, 0.008, 0.005, 0.020]) == (0.045, 0.020)
    assert pipeline_times([0.0, 1.0]) == (1.0, 1.0)


def test_single_stage_boundary():
    # One stage: nothing to overlap, serial == steady.
    assert pipeline_times([0.3]) == (0.3, 0.3)


@pytest.mark.parametrize("bad", [[], [-0.001, 1.0], [float("nan")], [float("inf"), 1.0], ["1"]])
def test_pipeline_times_rejects(bad):
    with pytest.raises(ValueError):
        pipeline_times(bad)


def test_seed_example():
    a = analyze(0.012, 0.008, 0.005, 0.020, workers=1)
    assert math.isclose(a.serial, 0.045) and math.isclose(a.steady, 0.020)
    assert math.isclose(a.utilisation_serial, 20 / 45)
    assert a.utilisation_pipelined == 1.0 and math.isclose(a.speedup, 2.25)
    assert a.binding == "gpu" and a.workers_needed == 1 and not a.data_bound


def test_data_bound_and_workers():
    a = analyze(0.030, 0.050, 0.005, 0.020, workers=2)
    assert math.isclose(a.steady, 0.040) and a.binding == "decode" and a.data_bound
    assert a.workers_needed == 4
    assert analyze(0.030, 0.050, 0.005, 0.020, workers=4).binding == "gpu"
    assert analyze(0.0, 0.0, 0.050, 0.020).binding == "h2d"


def test_workers_needed_edges():
    assert workers_needed(0.0, 0.0, 0.0) == 1
    assert workers_needed(0.01, 0.0, 0.0) is None
    assert workers_needed(0.012, 0.008, 0.020) == 1


@pytest.mark.parametrize("w", [0, -1, 1.5, True])
def test_analyze_rejects_workers(w):
    with pytest.raises(ValueError, match="workers"):
        analyze(0.01, 0.01, 0.01, 0.01, workers=w)
