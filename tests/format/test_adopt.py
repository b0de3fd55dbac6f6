"""index_tars: adopt tars made by `tar` and by webdataset.TarWriter without rewriting them."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
import webdataset as wds

from feedline.errors import ConfigError, FormatError
from feedline.format import index_tars, verify

Samples = dict[str, dict[str, bytes]]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_adopts_tars_made_by_the_tar_command(read_all: Callable[[Path], Samples], source: tuple[Path, Samples], tmp_path: Path) -> None:
    src, samples = source
    tars = tmp_path / "tars"
    tars.mkdir()
    keys = sorted(samples)
    halves = [keys[: len(keys) // 2], keys[len(keys) // 2 :]]
    for n, part in enumerate(halves):
        names = [f"{k}.{f}" for k in part for f in sorted(samples[k])]
        subprocess.run(["tar", "-cf", str(tars / f"part{n}.tar"), "-C", str(src), *names], check=True)
    before = [_digest(tars / f"part{n}.tar") for n in range(2)]
    manifest = index_tars([tars / "part0.tar", tars / "part1.tar"])
    assert [s.name for s in manifest.shards] == ["part0.tar", "part1.tar"]
    assert manifest.num_samples == len(samples) and manifest.align == 0
    assert read_all(tars) == samples
    assert verify(tars) == []
    assert [_digest(tars / f"part{n}.tar") for n in range(2)] == before  # never rewritten


def test_adopts_webdataset_tarwriter_output_into_another_folder(read_all: Callable[[Path], Samples], source: tuple[Path, Samples], tmp_path: Path) -> None:
    _, samples = source
    tar_path = tmp_path / "wds.tar"
    with wds.TarWriter(str(tar_path)) as sink:
        for key, fields in sorted(samples.items()):
            sink.write({"__key__": key, **fields})
    manifest = index_tars([tar_path], tmp_path / "meta")
    assert manifest.shards[0].name == "wds.tar"  # a manifest names files inside its folder only
    assert os.readlink(tmp_path / "meta" / "wds.tar") == "../wds.tar"
    assert (tmp_path / "meta" / "wds.tar.idx").exists()
    assert read_all(tmp_path / "meta") == samples
    assert verify(tmp_path / "meta") == []


def _tar(path: Path, members: list[tuple[str, bytes]]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize(
    ("members", "message", "key"),
    [
        ([("a.jpg", b"1"), ("b.jpg", b"2"), ("a.json", b"3")], "not contiguous", "a"),
        ([("a.jpg", b"1"), ("README", b"2")], "no field extension", None),
        ([("a.txt", b"1"), ("a.txt", b"2")], "same field twice", "a"),
    ],
)
def test_tars_that_cannot_be_adopted(tmp_path: Path, members: list[tuple[str, bytes]], message: str, key: str | None) -> None:
    path = _tar(tmp_path / "bad.tar", members)
    with pytest.raises(FormatError, match=message) as e:
        index_tars([path])
    assert e.value.shard == "bad.tar" and e.value.key == key
    assert "feedline pack" in (e.value.fix or "")  # the tar breaks a rule: re-indexing it cannot help
    assert not (tmp_path / "manifest.json").exists()


def test_a_folder_stands_for_its_tars_in_name_order(tmp_path: Path) -> None:
    shards = tmp_path / "shards"
    shards.mkdir()
    for n in (2, 0, 1):
        _tar(shards / f"train-{n:06d}.tar", [(f"{n:06d}.txt", b"shard %d" % n)])
    (shards / "notes.md").write_text("not a shard")
    manifest = index_tars([shards])
    assert [s.name for s in manifest.shards] == [f"train-{n:06d}.tar" for n in range(3)]
    assert (shards / "manifest.json").exists() and verify(shards) == []
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"holds no \.tar file"):
        index_tars([tmp_path / "empty"])


@pytest.mark.parametrize("opener", ["w:gz", "w:bz2", "w:xz"])
def test_compressed_tars_are_refused_with_the_fix(tmp_path: Path, opener: str) -> None:
    for name in ("shard.tar", "shard.tar.gz"):  # by content, whatever the name says
        path = tmp_path / name
        with tarfile.open(path, opener) as tar:
            info = tarfile.TarInfo("a.txt")
            info.size = 1
            tar.addfile(info, io.BytesIO(b"1"))
        with pytest.raises(ConfigError, match="compressed") as e:
            index_tars([path])
        assert "decompress" in (e.value.fix or "")
        path.unlink()
    gz = tmp_path / "only" / "x.tar.gz"
    gz.parent.mkdir()
    gz.write_bytes(b"\x1f\x8b" + b"0" * 64)
    with pytest.raises(ConfigError, match=r"no \.tar file \(compressed: x\.tar\.gz\)"):
        index_tars([gz.parent])


def test_truncated_and_non_tar_files(tmp_path: Path) -> None:
    path = _tar(tmp_path / "t.tar", [("a.jpg", b"x" * 5000), ("b.jpg", b"y" * 5000)])
    data = path.read_bytes()
    path.write_bytes(data[:3000])  # cut inside the first payload
    with pytest.raises(FormatError) as e:
        index_tars([path])
    assert e.value.shard == "t.tar"
    path.write_bytes(b"this is not a tar file at all" * 40)
    with pytest.raises(FormatError, match="cannot read tar"):
        index_tars([path])
    with pytest.raises(ConfigError):
        index_tars([])
    with pytest.raises(ConfigError, match="does not exist"):
        index_tars([tmp_path / "missing.tar"])
    (tmp_path / "d").mkdir()
    twin = _tar(tmp_path / "d" / "t.tar", [("a.jpg", b"1")])
    with pytest.raises(ConfigError, match="collide"):
        index_tars([twin, twin])


def test_adopting_packed_shards_gives_the_same_members(source: tuple[Path, Samples], tmp_path: Path) -> None:
    from feedline.format import load_index, pack

    packed = pack(source[0], tmp_path / "ds", shard_size=64 << 10, align=4096)
    adopted = index_tars([tmp_path / "ds" / s.name for s in packed.shards], tmp_path / "meta")
    assert [s.checksum for s in adopted.shards] == [s.checksum for s in packed.shards]
    for a, p in zip(adopted.shards, packed.shards, strict=True):
        mine, theirs = load_index(tmp_path / "ds", p), load_index(tmp_path / "meta", a)
        assert mine.keys == theirs.keys
        assert (mine.members == theirs.members).all()  # tarfile finds the payloads where we put them


def _samples_tar(path: Path, n: int = 4) -> Path:
    return _tar(path, [(f"{i:03d}.{f}", b"%d" % i * (50 if f == "jpg" else 1)) for i in range(n) for f in ("jpg", "cls")])


def _member_ends(path: Path) -> list[int]:
    with tarfile.open(path) as tar:
        return [m.offset_data + -(-m.size // 512) * 512 for m in tar]


@pytest.mark.parametrize("after", [0, 1, 3, 6])
def test_a_tar_cut_at_a_header_boundary_is_refused(tmp_path: Path, after: int) -> None:
    """tarfile reads such a tar as complete, silently short of its last members."""
    path = _samples_tar(tmp_path / "cut.tar")
    end = _member_ends(path)[after]
    path.write_bytes(path.read_bytes()[:end])
    with tarfile.open(path) as tar:
        assert len(tar.getmembers()) == after + 1  # what a plain reader believes
    with pytest.raises(FormatError, match="without an end-of-archive marker") as e:
        index_tars([path])
    assert e.value.shard == "cut.tar" and f"byte {end}" in str(e.value)
    assert not (tmp_path / "manifest.json").exists()


def test_a_garbage_header_mid_tar_is_refused(tmp_path: Path) -> None:
    path = _samples_tar(tmp_path / "g.tar")
    data = bytearray(path.read_bytes())
    at = _member_ends(path)[3]
    data[at : at + 512] = bytes(range(256)) * 2  # an invalid header: tarfile stops there quietly
    path.write_bytes(bytes(data))
    with pytest.raises(FormatError, match="unreadable bytes"):
        index_tars([path])


def test_a_negative_base256_size_is_a_format_error(tmp_path: Path) -> None:
    path = _samples_tar(tmp_path / "neg.tar", 1)
    data = bytearray(path.read_bytes())
    size = bytearray(b"\xff" * 12)  # base-256 (high bit set), all ones: -1
    data[124:136] = size
    data[148:156] = b" " * 8  # the checksum is summed with its own field as spaces
    data[148:156] = b"%06o\0 " % sum(data[:512])
    path.write_bytes(bytes(data))
    with tarfile.open(path) as tar:
        assert tar.next().size < 0  # type: ignore[union-attr]
    with pytest.raises(FormatError, match="negative size") as e:
        index_tars([path])
    assert e.value.shard == "neg.tar"


def test_empty_tars(tmp_path: Path) -> None:
    empty = _tar(tmp_path / "empty.tar", [])
    with pytest.raises(FormatError, match="no files") as e:
        index_tars([empty])
    assert e.value.shard == "empty.tar" and not (tmp_path / "manifest.json").exists()
    (tmp_path / "zero.tar").write_bytes(b"")
    with pytest.raises(FormatError, match="empty"):
        index_tars([tmp_path / "zero.tar"])
    full = _samples_tar(tmp_path / "full.tar")
    assert index_tars([empty, full]).num_samples == 4  # an empty shard beside others is fine


def test_indexing_one_shard_of_a_dataset_never_replaces_its_manifest(source: tuple[Path, Samples], tmp_path: Path) -> None:
    from feedline.format import pack, read_manifest
    from feedline.io import open_dataset

    ds = tmp_path / "ds"
    packed = pack(source[0], ds, shard_size=64 << 10, align=4096)
    assert len(packed.shards) > 1
    before = {p.name: p.read_bytes() for p in ds.iterdir()}
    with pytest.raises(ConfigError, match="already holds a dataset") as e:
        index_tars([ds / packed.shards[0].name])
    assert "--out" in str(e.value)
    assert {p.name: p.read_bytes() for p in ds.iterdir()} == before  # nothing touched, not even the .idx
    elsewhere = index_tars([ds / packed.shards[0].name], tmp_path / "one")  # the fix works
    assert elsewhere.num_samples == packed.shards[0].num_samples
    (ds / "manifest.json").write_bytes(b"{broken")
    with pytest.raises(ConfigError, match="cannot be read"):
        index_tars([ds / packed.shards[0].name])
    (ds / "manifest.json").write_bytes(before["manifest.json"])
    again = index_tars([ds / s.name for s in packed.shards])  # every shard: a re-index, allowed
    assert read_manifest(ds).num_samples == again.num_samples == packed.num_samples
    assert len(open_dataset(ds)) == packed.num_samples
