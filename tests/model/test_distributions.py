import json
import math

import numpy as np
import pytest

from feedline.errors import ConfigError
from feedline.model.distributions import (
    Constant,
    Distribution,
    Empirical,
    LogNormal,
    as_distribution,
    load_empirical,
    parse_dist,
)


def test_constant_and_as_distribution():
    d = as_distribution(0.012, name="read")
    assert d == Constant(0.012) and d.mean == 0.012
    assert np.all(d.sample(np.random.default_rng(0), 5) == 0.012)
    ln = LogNormal(0.01, 0.5)
    assert as_distribution(ln) is ln and isinstance(ln, Distribution)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_as_distribution_rejects_bad_numbers(bad):
    with pytest.raises(ValueError, match="read"):
        as_distribution(bad, name="read")


def test_as_distribution_rejects_other_types():
    with pytest.raises(TypeError, match="gpu"):
        as_distribution("12ms", name="gpu")  # type: ignore[arg-type]


def test_lognormal_median_and_mean_match_theory():
    d = LogNormal(0.010, 0.8)
    x = d.sample(np.random.default_rng(1), 200_000)
    assert math.isclose(float(np.median(x)), 0.010, rel_tol=0.02)
    assert math.isclose(float(x.mean()), d.mean, rel_tol=0.02)
    assert d.mean > 0.010 * 1.3  # the mean sits well above the median


def test_empirical_resamples_only_measured_values():
    d = Empirical.from_values([0.001, 0.002, 0.010])
    x = d.sample(np.random.default_rng(2), 1000)
    assert set(np.unique(x)) == {0.001, 0.002, 0.010}
    assert math.isclose(d.mean, 0.013 / 3)
    with pytest.raises(ValueError, match="empty"):
        Empirical(())
    with pytest.raises(ValueError, match=r"samples\[1\]"):
        Empirical.from_values([0.1, -0.1])


def test_parse_const_and_lognormal():
    assert parse_dist("const", 0.012) == Constant(0.012)
    assert parse_dist("const:5ms") == Constant(0.005)
    assert parse_dist("lognormal:sigma=0.5", 0.012) == LogNormal(0.012, 0.5)
    assert parse_dist("LogNormal: sigma=0.5, median=3ms") == LogNormal(0.003, 0.5)
    d = parse_dist("lognormal:sigma=1,mean=10ms")
    assert isinstance(d, LogNormal) and math.isclose(d.mean, 0.010)


def test_parse_empirical_formats(tmp_path):
    flat = tmp_path / "flat.json"
    flat.write_text(json.dumps([0.01, 0.02]))
    assert parse_dist("empirical:" + str(flat)) == Empirical((0.01, 0.02))
    keyed = tmp_path / "keyed.json"
    keyed.write_text(json.dumps({"read": [12, 14], "decode": [8]}))
    d = parse_dist(f"empirical:{keyed},unit=ms", stage="read")
    assert isinstance(d, Empirical) and np.allclose(d.samples, (0.012, 0.014))
    times = tmp_path / "times.json"
    times.write_text(json.dumps({"times": [100]}))
    d = load_empirical(times, unit="us")
    assert np.allclose(d.samples, (0.0001,))


@pytest.mark.parametrize(
    ("spec", "base", "match"),
    [
        ("gamma:k=2", 0.01, "unknown distribution"),
        ("const", None, "const needs a time"),
        ("lognormal", 0.01, "needs sigma"),
        ("lognormal:sigma=x", 0.01, "not a number"),
        ("lognormal:sigma=-1", 0.01, "sigma"),
        ("lognormal:sigma=1,mu=2", 0.01, "unknown option"),
        ("lognormal:sigma=1", None, "needs a median"),
        ("lognormal:sigma=1,median=1ms,mean=2ms", None, "not both"),
        ("empirical:", None, "needs a file"),
        ("const:12parsecs", None, "cannot parse"),
    ],
)
def test_parse_errors_are_config_errors(spec, base, match):
    with pytest.raises(ConfigError, match=match) as info:
        parse_dist(spec, base, stage="read")
    if "cannot parse" not in match:
        assert info.value.field == "read-dist"


def test_empirical_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        parse_dist(f"empirical:{tmp_path / 'missing.json'}", stage="read")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="cannot read"):
        load_empirical(bad)
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"decode": [1]}))
    with pytest.raises(ConfigError, match="no list"):
        load_empirical(wrong, stage="read")
    neg = tmp_path / "neg.json"
    neg.write_text(json.dumps([0.1, -2]))
    with pytest.raises(ConfigError, match="bad measured time"):
        load_empirical(neg)
    strs = tmp_path / "strs.json"
    strs.write_text(json.dumps(["a"]))
    with pytest.raises(ConfigError, match="bad measured time"):
        load_empirical(strs)
    with pytest.raises(ConfigError, match="unit"):
        load_empirical(neg, unit="parsec")
