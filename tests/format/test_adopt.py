"""index_tars: adopt tars made by `tar` and by webdataset.TarWriter without rewriting them."""

from __future__ import annotations

import hashlib
import io
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
    assert manifest.shards[0].name == "../wds.tar"
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
    ],
)
def test_tars_that_cannot_be_adopted(tmp_path: Path, members: list[tuple[str, bytes]], message: str, key: str | None) -> None:
    path = _tar(tmp_path / "bad.tar", members)
    with pytest.raises(FormatError, match=message) as e:
        index_tars([path])
    assert e.value.shard == "bad.tar" and e.value.key == key
    assert not (tmp_path / "manifest.json").exists()


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
