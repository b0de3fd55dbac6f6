"""ShardIndex validation: every inconsistency is a FormatError at open, naming shard/key/field."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from feedline.errors import ChecksumError, FormatError
from feedline.format import HEADER_DTYPE, MEMBER_DTYPE, ShardIndex, ShardWriter, encode_index

SHARD = "shard-000000.tar"


@pytest.fixture
def shard(tmp_path: Path) -> tuple[bytes, ShardIndex, bytes]:
    """(shard bytes, its index, the index bytes) for 4 samples of 2 fields."""
    path = tmp_path / SHARD
    with ShardWriter(path) as w:
        for i in range(4):
            w.write_sample(f"{i:03d}", {"jpg": bytes([i]) * (700 * i + 1), "json": b"{}"})
    index_bytes = path.with_name(SHARD + ".idx").read_bytes()
    data = path.read_bytes()
    return data, ShardIndex.from_bytes(index_bytes, shard_size=len(data), shard=SHARD), index_bytes


def _rebuild(index: ShardIndex, change: Callable[[np.ndarray], None], **kw: object) -> bytes:
    members = index.members.copy()
    change(members)
    args: dict = {"shard_size": index.shard_size, "shard_checksum": index.shard_checksum}
    args.update(kw)
    keys = args.pop("keys", index.keys)
    fields = args.pop("fields", index.fields)
    return encode_index(keys, fields, members, **args)


def test_valid_index_round_trips(shard: tuple[bytes, ShardIndex, bytes]) -> None:
    data, index, _ = shard
    assert index.keys == ["000", "001", "002", "003"]
    assert index.fields == ["jpg", "json"]
    assert index.sample_start.tolist() == [0, 2, 4, 6, 8]
    lo, hi = index.sample_extent(2)
    assert lo % 512 == 0 and hi - lo > 1401
    assert bytes(index.sample_fields(2, data)["jpg"]) == b"\x02" * 1401
    window = data[lo:hi]
    assert bytes(index.sample_fields(2, window, base=lo, verify=True)["json"]) == b"{}"
    with pytest.raises(ValueError, match="covers"):
        index.sample_fields(3, window, base=lo)
    with pytest.raises(IndexError):
        index.sample_extent(4)


def test_flipped_payload_byte_is_a_checksum_error_naming_key_and_field(shard: tuple[bytes, ShardIndex, bytes]) -> None:
    data, index, _ = shard
    bad = bytearray(data)
    lo, _ = index.sample_extent(1)
    bad[lo + 3] ^= 0xFF
    index.sample_fields(0, bad, verify=True)
    with pytest.raises(ChecksumError) as e:
        index.sample_fields(1, bad, verify=True)
    assert (e.value.shard, e.value.key, e.value.field) == (SHARD, "001", "jpg")


@pytest.mark.parametrize("delta", [-1, -512, 512, 1])
def test_truncated_or_padded_shard_is_an_error_at_open(shard: tuple[bytes, ShardIndex, bytes], delta: int) -> None:
    data, _, raw = shard
    with pytest.raises(FormatError, match="truncated or has trailing") as e:
        ShardIndex.from_bytes(raw, shard_size=len(data) + delta, shard=SHARD)
    assert e.value.shard == SHARD and e.value.fix


@pytest.mark.parametrize("cut", [0, 10, HEADER_DTYPE.itemsize - 1, HEADER_DTYPE.itemsize, HEADER_DTYPE.itemsize + 31, -1])
def test_truncated_index_is_an_error(shard: tuple[bytes, ShardIndex, bytes], cut: int) -> None:
    data, _, raw = shard
    with pytest.raises(FormatError) as e:
        ShardIndex.from_bytes(raw[:cut], shard_size=len(data), shard=SHARD)
    assert e.value.shard == SHARD


def test_trailing_bytes_in_the_index_and_bad_magic_version(shard: tuple[bytes, ShardIndex, bytes]) -> None:
    data, _, raw = shard
    with pytest.raises(FormatError, match="disagree"):
        ShardIndex.from_bytes(raw + b"\0", shard_size=len(data))
    with pytest.raises(FormatError, match="magic"):
        ShardIndex.from_bytes(b"X" + raw[1:], shard_size=len(data))
    header = np.frombuffer(raw, HEADER_DTYPE, count=1).copy()
    header["version"] = 99
    with pytest.raises(FormatError, match="version 99") as e:
        ShardIndex.from_bytes(header.tobytes() + raw[HEADER_DTYPE.itemsize :], shard_size=len(data))
    assert "upgrade" in (e.value.fix or "")


def test_any_flipped_index_bit_is_caught(shard: tuple[bytes, ShardIndex, bytes]) -> None:
    data, _, raw = shard
    for pos in range(0, len(raw), 7):
        bad = bytearray(raw)
        bad[pos] ^= 0x10
        with pytest.raises(FormatError):
            ShardIndex.from_bytes(bytes(bad), shard_size=len(data))


@pytest.mark.parametrize(
    ("change", "message", "key", "field"),
    [
        (lambda m: m["offset"].__setitem__(3, 1 << 40), "past the end", "001", "json"),
        (lambda m: m["size"].__setitem__(5, (1 << 64) - 1), "larger than the shard", "002", "json"),
        (lambda m: (m["offset"].__setitem__(7, (1 << 64) - 512), m["size"].__setitem__(7, 1024)), "past the end", "003", "json"),
        (lambda m: m["offset"].__setitem__(1, m["offset"][0]), "overlaps", "000", "json"),
        (lambda m: m["offset"].__setitem__(2, 0), "overlaps", "001", "jpg"),
        (lambda m: m["offset"].__setitem__(2, 1), "512-byte", "001", "jpg"),
        (lambda m: m["sample"].__setitem__(4, 0), "not sorted", "000", "jpg"),
        (lambda m: m["sample"].__setitem__(7, 9), "past the key table", None, "json"),
        (lambda m: m["field"].__setitem__(0, 7), "past the field table", "000", None),
        (lambda m: m["field"].__setitem__(1, 0), "same field twice", "000", "jpg"),
    ],
)
def test_inconsistent_records_are_errors_at_open(
    shard: tuple[bytes, ShardIndex, bytes], change: Callable[[np.ndarray], None], message: str, key: str | None, field: str | None
) -> None:
    data, index, _ = shard
    raw = _rebuild(index, change)
    with pytest.raises(FormatError, match=message) as e:
        ShardIndex.from_bytes(raw, shard_size=len(data), shard=SHARD)
    assert (e.value.shard, e.value.key, e.value.field) == (SHARD, key, field)


def test_counts_that_disagree_with_the_header_or_tables(shard: tuple[bytes, ShardIndex, bytes]) -> None:
    data, index, _ = shard
    with pytest.raises(FormatError, match="key table holds 5 names, the header says 4"):
        ShardIndex.from_bytes(_rebuild(index, lambda m: None, keys=["a\nb", "c", "d", "e"]), shard_size=len(data))
    with pytest.raises(FormatError, match="empty name"):
        ShardIndex.from_bytes(_rebuild(index, lambda m: None, keys=["a", "b", "c", ""]), shard_size=len(data))
    with pytest.raises(FormatError, match="twice"):
        ShardIndex.from_bytes(_rebuild(index, lambda m: None, keys=["a", "b", "a", "c"]), shard_size=len(data))
    with pytest.raises(FormatError, match="no members") as e:
        ShardIndex.from_bytes(_rebuild(index, lambda m: None, keys=[*index.keys, "004"]), shard_size=len(data))
    assert e.value.key == "004"
    header = np.frombuffer(encode_index(index.keys, index.fields, index.members, shard_size=len(data), shard_checksum=0), HEADER_DTYPE, count=1).copy()
    header["num_members"] = 1 << 60  # a huge count must fail on arithmetic, not on allocation
    with pytest.raises(FormatError, match="disagree"):
        ShardIndex.from_bytes(header.tobytes(), shard_size=len(data))


def test_empty_index_is_valid(tmp_path: Path) -> None:
    raw = encode_index([], [], np.zeros(0, MEMBER_DTYPE), shard_size=1024, shard_checksum=0)
    index = ShardIndex.from_bytes(raw, shard_size=1024)
    assert index.num_samples == 0 and len(index.members) == 0 and index.sample_start.tolist() == [0]


def test_load_names_the_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="cannot read index") as e:
        ShardIndex.load(tmp_path / "nope.idx", shard_size=10, shard="nope.tar")
    assert e.value.shard == "nope.tar"


def test_field_rows_find_each_samples_member_or_minus_one(tmp_path: Path) -> None:
    path = tmp_path / SHARD
    with ShardWriter(path) as w:
        for i in range(7):
            fields = {"f32": bytes(8), "json": b"{}"} if i % 3 else {"json": b"{}"}
            if i == 5:
                fields["cls"] = b"1"
            w.write_sample(f"{i:03d}", fields)
    data = path.read_bytes()
    index = ShardIndex.from_bytes(path.with_name(SHARD + ".idx").read_bytes(), shard_size=len(data))
    for name in ("f32", "json", "cls", "npy"):
        want = []
        for i in range(7):
            rows = [int(index.sample_start[i]) + k for k, rec in enumerate(index.sample_members(i))
                    if index.fields[rec["field"]] == name]
            want.append(rows[0] if rows else -1)
        assert index.field_rows(name).tolist() == want
    assert index.field_rows("f32") is index.field_rows("f32")  # built once
    row = int(index.field_rows("cls")[5])
    assert index.fields[index.members["field"][row]] == "cls" and index.members["sample"][row] == 5
