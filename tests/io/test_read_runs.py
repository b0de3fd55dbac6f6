"""read_many's fast path for contiguous runs of indices (the sequential case).

A run (``range``, list of ints or 1-D integer array of consecutive indices)
skips sorting and gathering; it must return exactly what the general path
returns, keep the views' lifetime rule, and leave every other input to the
general path (which also raises the errors).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from iodata import Samples, build_dataset, expected_samples, make_samples

from feedline.io import open_dataset
from feedline.io.dataset import _contiguous_run


def _as_bytes(sample: dict[str, object]) -> dict[str, object]:
    return {k: (v if k == "__key__" else bytes(v)) for k, v in sample.items()}  # type: ignore[call-overload]


@pytest.mark.parametrize(
    ("indices", "want"),
    [
        (range(3, 7), (3, 7)),
        (range(0, 40), (0, 40)),
        ([12, 13, 14, 15, 16], (12, 17)),
        ([39], (39, 40)),
        (np.arange(10, 30), (10, 30)),
        (np.arange(10, 30, dtype=np.int32), (10, 30)),
        (np.arange(10, 30, dtype=np.uint64), (10, 30)),
    ],
)
def test_runs_are_recognised(indices: object, want: tuple[int, int]) -> None:
    assert _contiguous_run(indices, 40) == want


@pytest.mark.parametrize(
    "indices",
    [
        range(0, 10, 2),
        range(5, 5),
        range(-3, 0),
        range(35, 41),
        [],
        [3, 4, 4],
        [4, 3],
        [1.0, 2.0],
        [True],
        [np.int64(1), np.int64(2)],
        [38, 39, 40],
        (1, 2, 3),
        np.array([5, 7, 6, 8]),
        np.array([5, 6, 6, 8]),
        np.array([-1, 0]),
        np.arange(6).reshape(2, 3),
        np.array([1.0, 2.0]),
        np.array([True, False]),
        np.array([], dtype=np.int64),
    ],
)
def test_everything_else_takes_the_general_path(indices: object) -> None:
    assert _contiguous_run(indices, 40) is None


def test_runs_read_the_same_bytes_as_the_general_path(tmp_path: Path) -> None:
    shards: list[Samples] = [
        make_samples(15, seed=1, prefix="a"),
        [],  # an empty shard between two others: runs must skip it
        make_samples(20, seed=2, prefix="b"),
        make_samples(5, seed=3, prefix="c"),
    ]
    want = expected_samples(shards)
    ds = open_dataset(build_dataset(tmp_path / "ds", shards), io="buffered")
    n = len(ds)
    assert n == len(want) == 40
    for lo, hi in [(0, 40), (0, 1), (14, 15), (13, 17), (10, 36), (34, 40), (15, 35)]:
        for indices in (range(lo, hi), list(range(lo, hi)), np.arange(lo, hi, dtype=np.int32)):
            got = ds.read_many(indices)  # type: ignore[arg-type]
            assert [_as_bytes(g) for g in got] == [{"__key__": want[i][0], **want[i][1]} for i in range(lo, hi)]
        # the general path (a non-run order) agrees sample by sample
        general = ds.read_many(list(reversed(range(lo, hi))))
        assert [_as_bytes(g) for g in reversed(general)] == [_as_bytes(g) for g in ds.read_many(range(lo, hi))]


def test_run_views_stay_valid_while_held(tmp_path: Path) -> None:
    shards = [make_samples(15, seed=1, prefix="a"), make_samples(20, seed=2, prefix="b")]
    want = expected_samples(shards)
    ds = open_dataset(build_dataset(tmp_path / "ds", shards), io="buffered")
    held = ds.read_many(np.arange(10, 25))  # crosses the shard boundary
    for _ in range(6):  # later runs must get other buffers while ``held`` is alive
        ds.read_many(np.arange(0, 35))
        ds.read_many(range(10, 25))
    assert [_as_bytes(s) for s in held] == [{"__key__": k, **f} for k, f in want[10:25]]


@pytest.mark.filterwarnings("ignore:io='direct'")  # tmp_path may refuse O_DIRECT: then it reads buffered
def test_run_with_verify_and_direct(tmp_path: Path) -> None:
    shards = [make_samples(15, seed=1, prefix="a"), make_samples(20, seed=2, prefix="b")]
    want = expected_samples(shards)
    root = build_dataset(tmp_path / "ds", shards)
    for io in ("buffered", "direct"):
        ds = open_dataset(root, io=io, verify=True)
        got = ds.read_many(range(5, 30))
        assert [_as_bytes(g) for g in got] == [{"__key__": k, **f} for k, f in want[5:30]]
