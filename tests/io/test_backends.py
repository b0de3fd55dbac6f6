"""The reader backends: byte-identical reads, O_DIRECT for real, fallbacks, auto."""

from __future__ import annotations

import errno
import os
import warnings
from pathlib import Path

import numpy as np
import pytest
from iodata import Samples, disk_dir, expected_samples

from feedline.errors import AlignmentError, DeviceError, ReadError
from feedline.io import (
    BufferedReader,
    DirectReader,
    Reader,
    _posix,
    aligned_empty,
    buffer_address,
    choose_backend,
    gds_status,
    make_reader,
    open_dataset,
    probe_direct,
)
from feedline.io.planner import align_up

ODD_SIZE = 3 * 4096 + 1234  # a file whose last block is partial


@pytest.fixture
def odd_file() -> tuple[Path, bytes]:
    base = disk_dir()
    if base is None:
        pytest.fail("no folder here accepts O_DIRECT")
    data = np.random.default_rng(7).integers(0, 256, ODD_SIZE, dtype=np.uint8).tobytes()
    path = base / f"odd-{os.getpid()}.bin"
    path.write_bytes(data)
    yield path, data
    path.unlink()


def _read(reader: Reader, path: Path, offset: int, size: int) -> bytes:
    handle = reader.open(str(path))
    try:
        buf = aligned_empty(size)
        n = reader.read_into(handle, offset, buf)
        return bytes(buf[:n])
    finally:
        reader.close(handle)


@pytest.mark.parametrize("offset", [0, 4096, 3 * 4096])
def test_buffered_and_direct_equal_a_plain_read_including_the_final_partial_block(
    odd_file: tuple[Path, bytes], offset: int
) -> None:
    path, data = odd_file
    size = align_up(ODD_SIZE - offset, 4096)
    direct = DirectReader()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a disk file system must not fall back
        got_direct = _read(direct, path, offset, size)
    assert direct.fallback_reason is None
    assert got_direct == data[offset:]
    assert _read(BufferedReader(), path, offset, ODD_SIZE - offset) == data[offset:]


def test_direct_handle_really_uses_o_direct(odd_file: tuple[Path, bytes]) -> None:
    path, _ = odd_file
    reader = DirectReader()
    handle = reader.open(str(path))
    try:
        assert handle.direct
        import fcntl

        assert fcntl.fcntl(handle.fd, fcntl.F_GETFL) & os.O_DIRECT
    finally:
        reader.close(handle)


def test_direct_rejects_unaligned_requests(odd_file: tuple[Path, bytes]) -> None:
    path, _ = odd_file
    reader = DirectReader()
    handle = reader.open(str(path))
    try:
        buf = aligned_empty(8192 + 4096)
        with pytest.raises(AlignmentError, match="buffer_address"):
            reader.read_into(handle, 0, buf[1:4097])
        with pytest.raises(AlignmentError, match="file_offset"):
            reader.read_into(handle, 100, buf[:4096])
        with pytest.raises(AlignmentError, match="size_bytes"):
            reader.read_into(handle, 0, buf[:1000])
    finally:
        reader.close(handle)


def test_direct_dataset_matches_buffered_for_every_sample(disk_dataset: Path, small_shards: list[Samples]) -> None:
    want = expected_samples(small_shards)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        direct = open_dataset(disk_dataset, io="direct", verify=True)
        got = direct.read_many(range(len(want)))
    buffered = open_dataset(disk_dataset, io="buffered").read_many(range(len(want)))
    for g, b, (key, fields) in zip(got, buffered, want, strict=True):
        assert g["__key__"] == b["__key__"] == key
        assert {f: bytes(g[f]) for f in fields} == {f: bytes(b[f]) for f in fields} == fields
    assert direct.backend.name == "direct"
    for i in (len(want) - 1, 0, 14, 15):  # single samples, last one ends at the shard's tail
        assert bytes(direct[i]["bin"]) == want[i][1]["bin"]


def _tmpfs_dir() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") else None


def test_refused_o_direct_warns_once_and_reads_buffered(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """On a file system that refuses O_DIRECT: one warning, then correct buffered reads.

    Kernels >= 6.6 let tmpfs accept O_DIRECT; where /dev/shm still refuses it the
    real refusal is used, otherwise the EINVAL of such a file system is injected
    at the one open call.
    """
    shm = _tmpfs_dir()
    refuses = shm is not None and not probe_direct(shm)[0]
    base = Path(shm) if refuses else tmp_path
    if not refuses:

        def einval(path: str) -> int:
            raise OSError(errno.EINVAL, "Invalid argument", path)

        monkeypatch.setattr(_posix, "_os_open_direct", einval)
    data = os.urandom(5000)
    files = [base / f"fallback-{os.getpid()}-{i}.bin" for i in range(2)]
    try:
        for f in files:
            f.write_bytes(data)
        reader = DirectReader()
        with pytest.warns(RuntimeWarning, match="refuses O_DIRECT") as record:
            assert _read(reader, files[0], 0, 8192) == data
            assert _read(reader, files[1], 4096, 4096) == data[4096:]
        assert len(record) == 1
        assert reader.fallback_reason is not None and "EINVAL" in reader.fallback_reason
    finally:
        for f in files:
            f.unlink(missing_ok=True)


def test_probe_reports_disk_and_tmpfs(tmp_path: Path) -> None:
    base = disk_dir()
    assert base is not None and probe_direct(str(base))[0]
    shm = _tmpfs_dir()
    if shm is not None:
        ok, why = probe_direct(shm)
        assert ("works" in why) == ok


def test_gds_without_kvikio_or_cuda_is_a_device_error_with_the_fix(dataset: Path) -> None:
    engaged, why = gds_status()
    assert not engaged and why
    with pytest.raises(DeviceError) as err:
        make_reader("gds")
    assert err.value.fix
    with pytest.raises(DeviceError):
        open_dataset(dataset, io="gds")


def test_auto_says_why_it_did_not_pick_gds(dataset: Path) -> None:
    choice = choose_backend("auto")
    assert choice.name == "buffered"
    assert "GDS" in choice.reason or "kvikio" in choice.reason
    ds = open_dataset(dataset)
    assert ds.backend == choice
    assert choose_backend("direct").name == "direct"
    with pytest.raises(ValueError, match="io must be one of"):
        choose_backend("nvme")


def test_readers_implement_the_interface() -> None:
    for reader in (BufferedReader(), DirectReader()):
        assert isinstance(reader, Reader)


def test_aligned_empty_is_aligned() -> None:
    for n in (1, 4095, 4096, 1 << 20):
        buf = aligned_empty(n)
        assert buf.size == n and buffer_address(buf) % 4096 == 0
    with pytest.raises(ValueError, match="align"):
        aligned_empty(10, 3000)


def test_direct_read_of_a_shard_truncated_after_open_names_the_sample(disk_dataset: Path) -> None:
    ds = open_dataset(disk_dataset, io="direct")
    index = ds._state().catalog.shards[1].index
    first = index.sample_members(7)[0]
    shard = disk_dataset / "shard-00001.tar"
    shard.write_bytes(shard.read_bytes()[: int(first["offset"]) + 3])
    with pytest.raises(ReadError) as err:
        ds.read_many([15 + 6, 15 + 7])
    assert err.value.shard == "shard-00001.tar"
    assert err.value.key == index.keys[7]
    assert err.value.field == index.fields[int(first["field"])]
