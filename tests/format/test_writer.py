"""ShardWriter: atomic publication, validation before writing, any bytes-like payload."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from feedline.errors import ConfigError
from feedline.format import ShardIndex, ShardWriter


def test_files_appear_only_when_closed(tmp_path: Path) -> None:
    path = tmp_path / "s.tar"
    with ShardWriter(path, align=4096) as w:
        w.write_sample("a", {"jpg": b"1" * 5000})
        assert not path.exists() and w.position > 0
        assert [p.name for p in tmp_path.iterdir()] == [".s.tar.partial"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.tar", "s.tar.idx"]
    assert w.info is not None and w.info.size == path.stat().st_size
    assert w.close() is w.info  # idempotent


def test_an_exception_inside_the_block_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), ShardWriter(tmp_path / "s.tar") as w:
        w.write_sample("a", {"jpg": b"1"})
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("key", "fields", "message"),
    [
        ("a", {"jpg": b"again"}, "written twice"),
        ("b", [("jpg", b"1"), ("jpg", b"2")], "repeats a field"),
        ("c", {}, "no fields"),
        ("d.e", {"jpg": b"1"}, "WebDataset name"),
    ],
)
def test_bad_samples_are_rejected_before_any_byte(tmp_path: Path, key: str, fields: object, message: str) -> None:
    with ShardWriter(tmp_path / "s.tar") as w:
        w.write_sample("a", {"jpg": b"1"})
        before = w.position
        with pytest.raises(ConfigError, match=message):
            w.write_sample(key, fields)  # type: ignore[arg-type]
        assert w.position == before
        w.write_sample("z", {"jpg": b"2"})
    assert w.index is not None and w.index.keys == ["a", "z"]


def test_memoryview_and_numpy_payloads_store_their_bytes(tmp_path: Path) -> None:
    arr = np.arange(10, dtype=np.float32)
    with ShardWriter(tmp_path / "s.tar") as w:
        w.write_sample("a", {"raw": memoryview(arr), "npy": arr.tobytes()})
    index = ShardIndex.load(tmp_path / "s.tar.idx", shard_size=(tmp_path / "s.tar").stat().st_size)
    data = (tmp_path / "s.tar").read_bytes()
    fields = index.sample_fields(0, data, verify=True)
    assert bytes(fields["raw"]) == arr.tobytes() == bytes(fields["npy"])


def test_large_payload_crosses_the_write_batches(tmp_path: Path) -> None:
    big = bytes(range(256)) * (20 << 12)  # 20 MiB: several writev batches
    with ShardWriter(tmp_path / "s.tar") as w:
        for i in range(3):
            w.write_sample(f"{i}", {"bin": big[i:]})
    index = ShardIndex.load(tmp_path / "s.tar.idx", shard_size=(tmp_path / "s.tar").stat().st_size)
    data = (tmp_path / "s.tar").read_bytes()
    for i in range(3):
        assert bytes(index.sample_fields(i, data, verify=True)["bin"]) == big[i:]


def test_a_sample_with_more_fields_than_one_writev_takes(tmp_path: Path) -> None:
    fields = {f"f{i:04d}": bytes([i % 256]) * (i % 700) for i in range(1200)}
    with ShardWriter(tmp_path / "s.tar") as w:
        w.write_sample("a", fields)
    index = ShardIndex.load(tmp_path / "s.tar.idx", shard_size=(tmp_path / "s.tar").stat().st_size)
    got = index.sample_fields(0, (tmp_path / "s.tar").read_bytes(), verify=True)
    assert {k: bytes(v) for k, v in got.items()} == fields
