"""pack -> tar -tf / tar -xf / WebDataset / ShardIndex read the same samples, aligned or not."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import webdataset as wds

from feedline.errors import ConfigError
from feedline.format import (
    DEFAULT_ALIGN,
    MANIFEST_NAME,
    load_index,
    pack,
    verify,
)

Samples = dict[str, dict[str, bytes]]


@pytest.mark.parametrize("align", [0, DEFAULT_ALIGN])
def test_pack_reads_back_identical_samples(read_all: Callable[[Path], Samples], source: tuple[Path, Samples], tmp_path: Path, align: int) -> None:
    src, samples = source
    manifest = pack(src, tmp_path / "ds", shard_size=64 << 10, align=align)
    assert len(manifest.shards) > 1
    assert manifest.num_samples == len(samples)
    assert read_all(tmp_path / "ds") == samples
    assert verify(tmp_path / "ds") == []
    fields = manifest.fields
    assert fields["json"]["count"] == len(samples)
    assert fields["cam0.jpg"]["total_bytes"] == sum(len(s["cam0.jpg"]) for s in samples.values())
    assert fields["lidar.npy"]["extension"] == "npy"
    assert fields["lidar.npy"]["min_size"] == min(len(s["lidar.npy"]) for s in samples.values() if "lidar.npy" in s)


@pytest.mark.parametrize("align", [0, DEFAULT_ALIGN])
def test_aligned_samples_start_on_4096(source: tuple[Path, Samples], tmp_path: Path, align: int) -> None:
    src, _ = source
    manifest = pack(src, tmp_path / "ds", shard_size=64 << 10, align=align)
    starts = []
    for info in manifest.shards:
        index = load_index(tmp_path / "ds", info)
        starts += [index.sample_extent(i)[0] for i in range(index.num_samples)]
        assert index.align == align
    aligned = sum(s % 4096 == 0 for s in starts)
    if align:
        assert aligned == len(starts)
    else:
        assert aligned < len(starts) / 2  # no padding: most samples start mid-page


@pytest.mark.parametrize("align", [0, DEFAULT_ALIGN])
def test_tar_lists_and_extracts_identical_files(source: tuple[Path, Samples], tmp_path: Path, align: int) -> None:
    src, samples = source
    manifest = pack(src, tmp_path / "ds", shard_size=64 << 10, align=align)
    out = tmp_path / "x"
    out.mkdir()
    listed: list[str] = []
    for info in manifest.shards:
        shard = tmp_path / "ds" / info.name
        res = subprocess.run(["tar", "-tf", str(shard)], capture_output=True, text=True, check=True)
        assert res.stderr == ""
        listed += res.stdout.split()
        subprocess.run(["tar", "-xf", str(shard), "-C", str(out)], check=True, capture_output=True)
    expected = sorted(f"{k}.{f}" for k, fs in samples.items() for f in fs)
    assert sorted(listed) == expected
    for key, fields in samples.items():
        for field, data in fields.items():
            assert (out / f"{key}.{field}").read_bytes() == data


@pytest.mark.parametrize("align", [0, DEFAULT_ALIGN])
def test_webdataset_reads_identical_samples(source: tuple[Path, Samples], tmp_path: Path, align: int) -> None:
    src, samples = source
    manifest = pack(src, tmp_path / "ds", shard_size=64 << 10, align=align)
    urls = [str(tmp_path / "ds" / s.name) for s in manifest.shards]
    got: Samples = {}
    for sample in wds.WebDataset(urls, shardshuffle=False):
        got[sample["__key__"]] = {k: v for k, v in sample.items() if not k.startswith("__")}
    assert got == samples
    members = []
    for url in urls:
        with open(url, "rb") as f:
            members += [(m["fname"], m["data"]) for m in wds.tariterators.tar_file_iterator(f)]
    assert dict(members) == {f"{k}.{f}": d for k, fs in samples.items() for f, d in fs.items()}


def test_pack_is_deterministic_and_workers_do_not_change_bytes(source: tuple[Path, Samples], tmp_path: Path) -> None:
    src, _ = source
    a = pack(src, tmp_path / "a", shard_size=64 << 10, align=4096)
    b = pack(src, tmp_path / "b", shard_size=64 << 10, align=4096, workers=4)
    assert a.shards == b.shards
    for info in a.shards:
        assert (tmp_path / "a" / info.name).read_bytes() == (tmp_path / "b" / info.name).read_bytes()
        assert (tmp_path / "a" / info.index).read_bytes() == (tmp_path / "b" / info.index).read_bytes()
    assert (tmp_path / "a" / MANIFEST_NAME).read_bytes() == (tmp_path / "b" / MANIFEST_NAME).read_bytes()


def test_shard_size_is_respected_and_samples_never_split(source: tuple[Path, Samples], tmp_path: Path) -> None:
    src, samples = source
    limit = 40 << 10
    manifest = pack(src, tmp_path / "ds", shard_size=limit, align=4096)
    assert all(s.size <= limit for s in manifest.shards)
    keys: list[str] = []
    for info in manifest.shards:
        index = load_index(tmp_path / "ds", info)
        keys += index.keys
        with tarfile.open(tmp_path / "ds" / info.name) as tar:
            assert {m.name.split(".")[0] for m in tar} == set(index.keys)
    assert keys == sorted(samples)


def test_a_sample_larger_than_the_shard_size_gets_its_own_shard(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.bin").write_bytes(b"a" * 100)
    (src / "b.bin").write_bytes(b"b" * 50_000)
    (src / "c.bin").write_bytes(b"c" * 100)
    manifest = pack(src, tmp_path / "ds", shard_size=8192)
    assert [s.num_samples for s in manifest.shards] == [1, 1, 1]
    assert manifest.shards[1].size > 8192


def test_list_file_and_several_sources_merge_fields_by_key(read_all: Callable[[Path], Samples], tmp_path: Path) -> None:
    cams, lidar = tmp_path / "cams", tmp_path / "lidar"
    cams.mkdir()
    lidar.mkdir()
    for i in range(3):
        (cams / f"{i}.jpg").write_bytes(b"J%d" % i)
        (lidar / f"{i}.npy").write_bytes(b"N%d" % i)
    (tmp_path / "lists").mkdir()
    listing = tmp_path / "lists" / "lidar.txt"
    # relative to the list's folder; outside it, a file is named by its base name
    listing.write_text("# lidar sweeps\n" + "".join(f"../lidar/{i}.npy\n" for i in range(3)) + "\n")
    manifest = pack([cams, listing], tmp_path / "ds")
    assert manifest.num_samples == 3
    assert set(manifest.fields) == {"jpg", "npy"}
    pack([cams, lidar], tmp_path / "ds2")
    got = read_all(tmp_path / "ds2")
    assert got == {str(i): {"jpg": b"J%d" % i, "npy": b"N%d" % i} for i in range(3)}


def test_bad_sources_are_config_errors(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    with pytest.raises(ConfigError, match="no files"):
        pack(src, tmp_path / "ds")
    with pytest.raises(ConfigError, match="does not exist"):
        pack(tmp_path / "nope", tmp_path / "ds")
    (src / "README").write_text("x")
    with pytest.raises(ConfigError, match=r"no files to pack in the sources \(1 skipped") as e:
        pack(src, tmp_path / "ds")
    assert e.value.fix
    (src / "README").unlink()
    (src / "a.jpg").write_bytes(b"1")
    other = tmp_path / "other"
    other.mkdir()
    (other / "a.jpg").write_bytes(b"2")
    with pytest.raises(ConfigError, match="two files") as e:
        pack([src, other], tmp_path / "ds")
    assert e.value.key == "a" and e.value.field == "jpg"
    for bad in ({"align": 1000}, {"align": -512}, {"shard_size": 0}, {"workers": 0}, {"checksum_algo": "md5"}):
        with pytest.raises(ConfigError):
            pack(src, tmp_path / "ds", **bad)  # type: ignore[arg-type]
    assert not (tmp_path / "ds" / MANIFEST_NAME).exists()


def test_crc32c_works_or_says_how_to_get_it(read_all: Callable[[Path], Samples], source: tuple[Path, Samples], tmp_path: Path) -> None:
    src, samples = source
    try:
        import crc32c  # noqa: F401
    except ImportError:
        with pytest.raises(ConfigError, match="crc32c") as e:
            pack(src, tmp_path / "ds", checksum_algo="crc32c")
        assert "pip install crc32c" in (e.value.fix or "")
        return
    manifest = pack(src, tmp_path / "ds", checksum_algo="crc32c")
    assert manifest.checksum_algo == "crc32c"
    assert read_all(tmp_path / "ds") == samples and verify(tmp_path / "ds") == []


def test_repack_over_a_dataset_replaces_it_and_drops_stale_shards(read_all: Callable[[Path], Samples], source: tuple[Path, Samples], tmp_path: Path) -> None:
    src, samples = source
    first = pack(src, tmp_path / "ds", shard_size=16 << 10)
    second = pack(src, tmp_path / "ds", shard_size=1 << 20)
    assert len(first.shards) > len(second.shards) == 1
    left = sorted(p.name for p in (tmp_path / "ds").iterdir())
    assert left == [MANIFEST_NAME, "shard-000000.tar", "shard-000000.tar.idx"]
    assert read_all(tmp_path / "ds") == samples
    shutil.rmtree(tmp_path / "ds")


def test_index_arrays_have_the_documented_dtypes(source: tuple[Path, Samples], tmp_path: Path) -> None:
    src, _ = source
    manifest = pack(src, tmp_path / "ds")
    index = load_index(tmp_path / "ds", manifest.shards[0])
    assert index.members.dtype.names == ("sample", "field", "offset", "size", "checksum")
    assert [index.members.dtype[n].str for n in index.members.dtype.names] == ["<u4", "<u2", "<u8", "<u8", "<u8"]
    assert index.sample_start.dtype == np.int64 and len(index.sample_start) == index.num_samples + 1
    order = np.lexsort((index.members["offset"], index.members["sample"]))
    assert (order == np.arange(len(order))).all()


def test_output_folder_inside_the_source_is_not_packed(source: tuple[Path, Samples], read_all: Callable[[Path], Samples]) -> None:
    src, samples = source
    pack(src, src / "packed")
    manifest = pack(src, src / "packed")  # the second run must not pick up the first run's shards
    assert manifest.num_samples == len(samples)
    assert read_all(src / "packed") == samples


def test_durable_pack_fsyncs_and_no_fsync_pack_writes_the_same_bytes(
    source: tuple[Path, Samples], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    src, _ = source
    real_fsync = os.fsync
    calls: list[int] = []

    def counting_fsync(fd: int) -> None:  # a spy: the real fsync still runs
        calls.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    durable = pack(src, tmp_path / "a", shard_size=64 << 10)
    shards = len(durable.shards)
    # every shard, every index, the manifest and the folder (at least once per shard)
    assert len(calls) >= 2 * shards + 2
    calls.clear()
    fast = pack(src, tmp_path / "b", shard_size=64 << 10, durable=False)
    assert calls == []
    assert fast == durable
    for name in sorted(p.name for p in (tmp_path / "a").iterdir()):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert verify(tmp_path / "b") == []
