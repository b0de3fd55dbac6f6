"""Damaged shards under a reader: only feedline's own errors, at the right place.

Random byte flips and truncations applied to a shard after the dataset is
opened: reading every sample with ``verify=True`` either returns the right
bytes, or raises ChecksumError (flip inside a payload) / ReadError (shard cut
short), naming the shard, key and field that are really affected.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from iodata import CUTS, FLIPS, Samples, build_dataset, damage, fresh_copy, make_samples

from feedline.errors import ChecksumError, ReadError
from feedline.io import open_dataset

SHARDS: list[Samples] = [make_samples(12, seed=21, max_size=9000, prefix="x")]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_dataset(tmp_path_factory.mktemp("pristine") / "ds", SHARDS)


def _members(root: Path) -> list[tuple[int, int, str, str]]:
    ds = open_dataset(root)
    index = ds._state().catalog.shards[0].index
    out = []
    for s in range(index.num_samples):
        for m in index.sample_members(s).tolist():
            _, fid, off, size, _ = m
            out.append((int(off), int(size), index.keys[s], index.fields[fid]))
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flips=FLIPS, cut=CUTS)
@pytest.mark.parametrize("io", ["buffered", "direct"])
def test_flips_and_cuts_raise_only_placed_errors(
    pristine: Path, tmp_path: Path, io: str, flips: list[int], cut: int | None
) -> None:
    root = fresh_copy(pristine, tmp_path / f"ds-{io}")
    members = _members(root)
    ds = open_dataset(root, io=io, verify=True)  # opened before the damage
    flipped, length = damage(root / "shard-00000.tar", flips, cut)
    damaged = [(k, fld) for off, size, k, fld in members if any(off <= f < off + size for f in flipped)]
    short = [(k, fld) for off, size, k, fld in members if off + size > length]
    try:
        got = ds.read_many(range(len(ds)))
    except ChecksumError as e:
        assert (e.key, e.field) in damaged and e.shard == "shard-00000.tar"
    except ReadError as e:
        assert (e.key, e.field) in short and e.shard == "shard-00000.tar"
    else:
        assert not damaged and not short
        want = {k: f for k, f in SHARDS[0]}
        for s in got:
            assert {k: bytes(v) for k, v in s.items() if k != "__key__"} == want[s["__key__"]]


@pytest.mark.parametrize("io", ["buffered", "direct"])
def test_cut_past_the_last_member_loses_no_sample(pristine: Path, tmp_path: Path, io: str) -> None:
    # Windows are rounded up to 4 KiB, so a cut in the tar padding or trailer
    # makes the window read short while every member is still whole.
    root = tmp_path / f"ds-{io}"
    shutil.copytree(pristine, root)
    members = _members(root)
    ds = open_dataset(root, io=io, verify=True)
    shard = root / "shard-00000.tar"
    last_end = max(off + size for off, size, _, _ in members)
    assert last_end < shard.stat().st_size  # there is a trailer to cut
    with open(shard, "r+b") as f:
        f.truncate(last_end)
    got = ds.read_many(range(len(ds)))
    want = {k: f for k, f in SHARDS[0]}
    assert {s["__key__"]: {k: bytes(v) for k, v in s.items() if k != "__key__"} for s in got} == want
    # One byte less and the last member is cut: the error names it.
    with open(shard, "r+b") as f:
        f.truncate(last_end - 1)
    with pytest.raises(ReadError) as info:
        ds.read_many(range(len(ds)))
    _, _, key, field = max(members)  # the member with the largest offset ends last
    assert (info.value.key, info.value.field) == (key, field)
