"""GPU-machine checks of feedline.io's gds backend (KvikIO CuFile into device memory).

Collected only with FEEDLINE_GPU=1 (bench/gpu_check.py runs ``pytest tests/gpu``).
Fails, never skips, without CUDA or kvikio: ``io="gds"`` must work on the GPU
machine. Every sample read through ``gds`` must be byte-identical to the
buffered read, including fields in a shard's final partial 4096-byte block.
"""

from __future__ import annotations

import os
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from feedline.format import index_tars, pack
from feedline.io import BufferedReader, GdsReader, aligned_empty, gds_status, open_dataset
from feedline.io.planner import align_up


def _scratch() -> Path:
    # Prefer a disk-backed folder next to the checkout (GDS needs a real file system).
    base = Path(__file__).resolve().parents[2] / ".pytest_cache"
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(dir=base, prefix="gds-"))


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    path = _scratch()
    yield path
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def _samples(n: int, seed: int) -> list[tuple[str, dict[str, bytes]]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        fields = {"cam.bin": rng.integers(0, 256, int(rng.integers(1, 70_000)), dtype=np.uint8).tobytes()}
        if i % 2:
            fields["imu.bin"] = rng.integers(0, 256, int(rng.integers(0, 5_000)), dtype=np.uint8).tobytes()
        out.append((f"{i:06d}", fields))
    return out


@pytest.fixture(scope="module")
def packed(scratch: Path) -> Path:
    src = scratch / "src"
    src.mkdir()
    for key, fields in _samples(120, 1):
        for field, data in fields.items():
            (src / f"{key}.{field}").write_bytes(data)
    pack([src], scratch / "aligned", shard_size=2 << 20, align=4096)
    return scratch / "aligned"


@pytest.fixture(scope="module")
def adopted(scratch: Path) -> Path:
    """Plain tars (512-byte members, not 4096-aligned) adopted with feedline index."""
    root = scratch / "adopted"
    root.mkdir()
    tars = []
    samples = _samples(50, 2)
    for s in range(2):
        tar = root / f"part-{s}.tar"
        with tarfile.open(tar, "w", format=tarfile.PAX_FORMAT) as t:
            for key, fields in samples[s * 25 : (s + 1) * 25]:
                for field, data in fields.items():
                    info = tarfile.TarInfo(f"{key}.{field}")
                    info.size = len(data)
                    import io as _io

                    t.addfile(info, _io.BytesIO(data))
        tars.append(tar)
    index_tars(tars, root)
    return root


def test_cuda_and_kvikio_are_present() -> None:
    assert torch.cuda.is_available(), "tests/gpu needs a CUDA device"
    import kvikio  # noqa: F401  (a missing kvikio fails here, loudly)

    engaged, why = gds_status()
    print(f"gds_status: engaged={engaged}: {why}")  # in the GPU check log


def test_gds_reader_fixes_its_device_when_made() -> None:
    """Reads run in worker threads, whose current CUDA device is their own: the reader's
    buffers go to the device current where it was made, from any thread."""
    import threading

    reader = GdsReader()
    assert reader.device_obj.index == torch.cuda.current_device()
    seen: list[torch.device] = []
    t = threading.Thread(target=lambda: seen.append(reader.allocate(4096).device))
    t.start()
    t.join()
    assert seen == [reader.device_obj]


def test_gds_reader_reads_a_final_partial_block(scratch: Path) -> None:
    size = 5 * 4096 + 777
    data = os.urandom(size)
    path = scratch / "odd.bin"
    path.write_bytes(data)
    reader = GdsReader()
    handle = reader.open(str(path))
    try:
        for offset in (0, 4096, 4 * 4096, 5 * 4096):
            want = data[offset:]
            buf = reader.allocate(align_up(len(want), 4096))
            assert buf.data_ptr() % 4096 == 0
            got = reader.read_into(handle, offset, buf)
            assert got == len(want)
            assert bytes(buf[:got].cpu().numpy()) == want
    finally:
        reader.close(handle)
    host = aligned_empty(size)
    buffered = BufferedReader()
    fd = buffered.open(str(path))
    try:
        assert buffered.read_into(fd, 0, host) == size and bytes(host) == data
    finally:
        buffered.close(fd)


@pytest.mark.parametrize("which", ["packed", "adopted"])
@pytest.mark.parametrize("max_window", [4096, 8 << 20])
def test_every_sample_matches_buffered(which: str, max_window: int, request: pytest.FixtureRequest) -> None:
    root = request.getfixturevalue(which)
    gds = open_dataset(root, io="gds", verify=True, max_window=max_window)
    host = open_dataset(root, io="buffered")
    assert gds.backend.name == "gds"
    n = len(host)
    order = list(range(n)) + list(range(n - 1, -1, -1))[:17]
    got = gds.read_many(order)
    want = host.read_many(order)
    past_eof = 0
    for g, w in zip(got, want, strict=True):
        assert g["__key__"] == w["__key__"]
        assert set(g) == set(w)
        for field, view in w.items():
            if field == "__key__":
                continue
            tensor = g[field]
            assert tensor.is_cuda and tensor.dtype == torch.uint8
            assert bytes(tensor.cpu().numpy()) == bytes(view)
    for shard in host._state().catalog.shards:
        # direct windows that run past end of file (their final block is partial)
        past_eof += int(align_up(int(shard.end[-1]), 4096) > shard.size)
    print(f"{which}: {n} samples; {past_eof} shards read a final partial block")


def test_auto_picks_gds_only_when_engaged(packed: Path) -> None:
    engaged, why = gds_status()
    ds = open_dataset(packed)
    assert (ds.backend.name == "gds") == engaged, (ds.backend, why)
    assert ds.backend.reason
