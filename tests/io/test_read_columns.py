"""``PackedDataset.read_fields_into``: fixed-size fields read straight into the caller's rows."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from iodata import CUTS, FLIPS, Samples, build_dataset, damage, disk_dir, fresh_copy

from feedline.errors import ChecksumError, ConfigError, ReadError
from feedline.io import open_dataset


def _fixed(n: int, seed: int, prefix: str) -> Samples:
    """Samples with a 4096-byte ``f32`` field, an odd-sized ``u8`` one and a ragged ``bin``."""
    rng = np.random.default_rng(seed)
    return [
        (f"{prefix}{i:05d}", {
            "f32": rng.standard_normal(1024).astype(np.float32).tobytes(),
            "u8": rng.integers(0, 256, 37, dtype=np.uint8).tobytes(),
            "bin": bytes(int(rng.integers(0, 9000))),
        })
        for i in range(n)
    ]


SHARDS = [_fixed(30, 1, "a"), _fixed(7, 2, "b"), _fixed(25, 3, "c")]
N = sum(len(s) for s in SHARDS)


@pytest.fixture(params=["buffered", "direct"])
def fixed(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """The fixed-size dataset, on a disk that takes O_DIRECT for the direct reader."""
    if request.param == "buffered":
        yield build_dataset(tmp_path / "ds", SHARDS), "buffered"
        return
    base = disk_dir()
    if base is None:
        pytest.fail("no folder here accepts O_DIRECT; the direct path cannot be tested")
    target = Path(tempfile.mkdtemp(dir=base))
    try:
        yield build_dataset(target / "ds", SHARDS), "direct"
    finally:
        shutil.rmtree(target, ignore_errors=True)


def _out(n: int) -> dict[str, np.ndarray]:
    return {"f32": np.full((n, 1024), np.nan, np.float32), "u8": np.zeros((n, 37), np.uint8)}


@pytest.mark.timeout(60)
def test_rows_equal_read_many_in_any_order(fixed: tuple[Path, str]) -> None:
    root, io = fixed
    ds = open_dataset(root, io=io)
    rng = np.random.default_rng(0)
    orders = [rng.permutation(N).tolist(), list(range(N)), [5, 5, N - 1, 0, 31, 30, 5], [-1, -N]]
    for order in orders:
        out = _out(len(order))
        keys = ds.read_fields_into(order, out)
        want = ds.read_many(order)
        assert keys == [s["__key__"] for s in want]
        for i, s in enumerate(want):
            assert out["f32"][i].tobytes() == bytes(s["f32"])
            assert out["u8"][i].tobytes() == bytes(s["u8"])


@pytest.mark.timeout(60)
def test_only_the_asked_fields_are_written(fixed: tuple[Path, str]) -> None:
    root, io = fixed
    ds = open_dataset(root, io=io, verify=True)
    u8 = np.zeros((3, 37), np.uint8)
    assert ds.read_fields_into(np.array([2, 40, 31]), {"u8": u8}) == ["a00002", "c00003", "b00001"]
    assert u8[1].tobytes() == SHARDS[2][3][1]["u8"]
    assert ds.read_fields_into([], {"u8": np.zeros((0, 37), np.uint8)}) == []


def _damaged(tmp_path: Path, change: str) -> Path:
    shards = [list(s) for s in SHARDS]
    key, fields = shards[1][4]
    fields = dict(fields)
    if change == "missing":
        del fields["u8"]
    else:
        fields["u8"] = fields["u8"] + b"x"
    shards[1][4] = (key, fields)
    return build_dataset(tmp_path / change, shards)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("io", ["buffered", "auto"])
@pytest.mark.parametrize("change", ["missing", "longer"])
def test_a_sample_that_does_not_fit_names_shard_key_and_field(tmp_path: Path, change: str, io: str) -> None:
    ds = open_dataset(_damaged(tmp_path, change), io=io)
    out = _out(3)
    with pytest.raises(ReadError) as err:
        ds.read_fields_into([0, 34, 1], out)
    e = err.value
    assert (e.shard, e.key, e.field) == ("shard-00001.tar", "b00004", "u8")
    assert ("no such field" if change == "missing" else "38 bytes") in str(e)
    out = {"f32": np.zeros((2, 1024), np.float32)}  # the field that fits still reads
    ds.read_fields_into([34, 0], out)
    assert out["f32"][0].tobytes() == SHARDS[1][4][1]["f32"]


@pytest.mark.timeout(60)
def test_corruption_and_truncation_name_the_sample(tmp_path: Path) -> None:
    root = build_dataset(tmp_path / "ds", SHARDS)
    ds = open_dataset(root, verify=True, io="buffered")
    member = ds._state().catalog.shards[2].index
    row = int(member.field_rows("f32")[10])
    offset = int(member.members["offset"][row])
    path = root / "shard-00002.tar"
    data = bytearray(path.read_bytes())
    data[offset + 100] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ChecksumError) as err:
        ds.read_fields_into([0, 47], _out(2))
    assert (err.value.key, err.value.field) == ("c00010", "f32")
    plain = open_dataset(root, io="buffered")
    plain.read_fields_into([0, 47], _out(2))  # without verify the flipped byte is data
    with open(path, "r+b") as f:
        f.truncate(offset + 10)
    with pytest.raises(ReadError) as err:
        plain.read_fields_into([47], _out(1))
    assert (err.value.shard, err.value.key, err.value.field) == ("shard-00002.tar", "c00010", "f32")


@pytest.mark.timeout(60)
def test_bad_out_arrays_are_config_errors(tmp_path: Path) -> None:
    ds = open_dataset(build_dataset(tmp_path / "ds", SHARDS))
    with pytest.raises(ConfigError, match="one row per index"):
        ds.read_fields_into([0, 1], {"f32": np.zeros((3, 1024), np.float32)})
    with pytest.raises(ConfigError, match="C-contiguous"):
        ds.read_fields_into([0, 1], {"f32": np.zeros((1024, 2), np.float32).T})
    with pytest.raises(ReadError, match="4096"):
        ds.read_fields_into([0], {"f32": np.zeros((1, 1000), np.float32)})
    with pytest.raises(IndexError):
        ds.read_fields_into([N], {"f32": np.zeros((1, 1024), np.float32)})


@pytest.fixture(scope="module")
def pristine_fixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_dataset(tmp_path_factory.mktemp("pristine") / "ds", [SHARDS[0]])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flips=FLIPS, cut=CUTS)
@pytest.mark.parametrize("io", ["buffered", "direct"])
@pytest.mark.timeout(120)
def test_flips_and_cuts_raise_only_placed_errors(
    pristine_fixed: Path, tmp_path: Path, io: str, flips: list[int], cut: int | None
) -> None:
    root = fresh_copy(pristine_fixed, tmp_path / f"ds-{io}")
    ds = open_dataset(root, io=io, verify=True)  # opened before the damage
    index = ds._state().catalog.shards[0].index
    members = [(int(m["offset"]), int(m["size"]), index.keys[int(m["sample"])], index.fields[int(m["field"])])
               for m in index.members]
    flipped, length = damage(root / "shard-00000.tar", flips, cut)
    # The buffered reader reads only the asked fields; the others read whole windows (and
    # verify every field in them), so their errors may name any damaged member.
    asked = ("f32", "u8") if io == "buffered" else tuple(index.fields)
    damaged = {(k, f) for off, size, k, f in members if f in asked and any(off <= x < off + size for x in flipped)}
    short = {(k, f) for off, size, k, f in members if f in asked and off + size > length}
    order = np.random.default_rng(len(flipped)).permutation(len(ds))
    out = _out(len(order))
    try:
        keys = ds.read_fields_into(order, out)
    except ChecksumError as e:
        assert (e.key, e.field) in damaged and e.shard == "shard-00000.tar"
    except ReadError as e:
        assert (e.key, e.field) in short and e.shard == "shard-00000.tar"
    else:
        assert not {(k, f) for k, f in damaged | short if f in ("f32", "u8")}
        want = dict(SHARDS[0])
        for i, key in enumerate(keys):
            assert out["f32"][i].tobytes() == want[key]["f32"] and out["u8"][i].tobytes() == want[key]["u8"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("verify", [False, True])
def test_read_fields_gives_the_bytes_read_many_gives(fixed: tuple[Path, str], verify: bool) -> None:
    """Only the asked fields, of any size (``bin`` varies, one is empty; a shard lacking
    ``u8`` in one sample gives None there), in the asked order, repeats included."""
    root, io = fixed
    shards = [list(s) for s in SHARDS]
    key, fields = shards[2][3]
    shards[2][3] = (key, {k: v for k, v in fields.items() if k != "u8"})
    shards[1][0] = (shards[1][0][0], {**shards[1][0][1], "bin": b""})
    root = build_dataset(root.parent / "lacks", shards)
    ds = open_dataset(root, io=io, verify=verify)
    for order in (np.random.default_rng(1).permutation(N).tolist(), [40, 5, 5, N - 1, 30, -1], []):
        keys, views = ds.read_fields(order, ["bin", "u8"])
        want = ds.read_many(order)
        assert keys == [s["__key__"] for s in want]
        assert set(views) == {"bin", "u8"}
        for f in ("bin", "u8"):
            got = [None if v is None else bytes(v) for v in views[f]]
            assert got == [bytes(s[f]) if f in s else None for s in want]
    assert ds.read_fields([40], ["u8"])[1]["u8"] == [None]  # c00003 has no u8


@pytest.mark.timeout(60)
def test_read_fields_names_a_truncated_sample(tmp_path: Path) -> None:
    root = build_dataset(tmp_path / "ds", SHARDS)
    ds = open_dataset(root, io="buffered")
    index = ds._state().catalog.shards[2].index
    offset = int(index.members["offset"][int(index.field_rows("bin")[10])])
    with open(root / "shard-00002.tar", "r+b") as f:
        f.truncate(offset + 1)
    with pytest.raises(ReadError) as err:
        ds.read_fields([0, 47], ["bin"])
    assert (err.value.shard, err.value.key, err.value.field) == ("shard-00002.tar", "c00010", "bin")

