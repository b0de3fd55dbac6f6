"""Round trips: pack -> every backend; WebDataset and tar read the same bytes we do."""

from __future__ import annotations

import shutil
import tarfile
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from iodata import Samples, disk_dir, make_samples, pack_dataset

from feedline.io import open_dataset


@pytest.fixture(scope="module")
def packed_aligned() -> Iterator[tuple[Path, dict[str, dict[str, bytes]]]]:
    """An align=4096 packed dataset of several shards on a disk file system."""
    base = disk_dir()
    if base is None:
        pytest.fail("no folder here accepts O_DIRECT")
    shards: list[Samples] = [make_samples(60, seed=11, max_size=30000)]
    tmp = Path(tempfile.mkdtemp(dir=base))
    try:
        root = pack_dataset(tmp / "packed", shards, align=4096, shard_size=400_000)
        yield root, {k: f for k, f in shards[0]}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _all(ds_root: Path, io: str) -> dict[str, dict[str, bytes]]:
    ds = open_dataset(ds_root, io=io, verify=True)
    out = {}
    for s in ds.read_many(range(len(ds))):
        out[s["__key__"]] = {k: bytes(v) for k, v in s.items() if k != "__key__"}
    return out


def test_pack_then_read_with_every_host_backend(packed_aligned: tuple[Path, dict[str, dict[str, bytes]]]) -> None:
    root, want = packed_aligned
    assert len(list(root.glob("*.tar"))) > 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        direct = _all(root, "direct")
    assert direct == _all(root, "buffered") == want


def test_aligned_samples_start_on_4096_and_single_reads_are_direct_sized(
    packed_aligned: tuple[Path, dict[str, dict[str, bytes]]],
) -> None:
    root, want = packed_aligned
    ds = open_dataset(root, io="direct", max_window=4096 * 16, max_gap=0)
    for shard in ds._state().catalog.shards:
        assert (shard.first % 4096 == 0).all()
    for i in range(len(ds)):
        s = ds[i]
        assert {k: bytes(v) for k, v in s.items() if k != "__key__"} == want[s["__key__"]]


def test_webdataset_and_tar_read_the_same_bytes(packed_aligned: tuple[Path, dict[str, dict[str, bytes]]]) -> None:
    import webdataset as wds

    root, want = packed_aligned
    ours = _all(root, "buffered")
    urls = [str(p) for p in sorted(root.glob("*.tar"))]
    theirs: dict[str, dict[str, bytes]] = {}
    for sample in wds.WebDataset(urls, shardshuffle=False):
        theirs[sample["__key__"]] = {k: v for k, v in sample.items() if not k.startswith("__")}
    assert theirs == ours == want
    count = 0
    for u in urls:
        with tarfile.open(u) as tar:
            count += len(tar.getmembers())
    assert count == sum(len(f) for f in want.values())
