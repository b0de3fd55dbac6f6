import math

import pytest

from feedline.errors import ConfigError, FeedlineError, FormatError
from feedline.units import format_bytes, format_duration, parse_bytes, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("12ms", 0.012), ("250us", 250e-6), ("1.5s", 1.5), ("2", 2.0), (0.5, 0.5), ("3 ms", 0.003)],
)
def test_parse_duration(text, seconds):
    assert math.isclose(parse_duration(text), seconds)


@pytest.mark.parametrize("bad", ["", "12 parsecs", "-1ms", "ms", "nan", float("inf"), -2.0])
def test_parse_duration_rejects(bad):
    with pytest.raises(ValueError):
        parse_duration(bad)


@pytest.mark.parametrize(
    ("text", "n"), [("4096", 4096), ("2GiB", 2 * 2**30), ("512MB", 512 * 10**6), ("1G", 2**30), (7, 7)]
)
def test_parse_bytes(text, n):
    assert parse_bytes(text) == n


@pytest.mark.parametrize("bad", ["lots", "1XB", "-5"])
def test_parse_bytes_rejects(bad):
    with pytest.raises(ConfigError, match="size"):
        parse_bytes(bad)


def test_format():
    assert format_duration(0.012) == "12 ms"
    assert format_duration(0.02032) == "20.32 ms"
    assert format_duration(3e-6) == "3 us"
    assert format_duration(1.5) == "1.5 s" and format_duration(0) == "0 ms"
    assert format_bytes(3 * 2**20) == "3.0 MiB"


def test_error_carries_place_and_fix_and_pickles():
    import pickle

    err = FormatError("truncated member", shard="a.tar", key="000001", field="jpg", fix="re-pack")
    assert err.shard == "a.tar" and err.key == "000001" and err.worker is None
    assert "shard='a.tar'" in str(err) and "Fix: re-pack" in str(err)
    back = pickle.loads(pickle.dumps(err))
    assert isinstance(back, FeedlineError) and back.field == "jpg" and str(back) == str(err)
