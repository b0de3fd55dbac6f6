"""Streaming pack: large files are copied in chunks (memory flat whatever their size),
checksummed on the way; a file that changes size while it is copied aborts the shard."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from feedline.errors import ReadError
from feedline.format import (
    FilePayload,
    ShardIndex,
    ShardWriter,
    load_index,
    pack,
    read_manifest,
    verify,
)
from feedline.format._pack import STREAM_AT

# Peak RSS from /proc/self/status VmHWM: the high-water mark of this process's own memory
# since exec. (``ru_maxrss`` is not: Linux carries the forking parent's high-water mark
# into it across exec, so under a big pytest process it read 439 MiB for a 37 MiB pack.)
_PEAK = """
import json, sys
def hwm():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
from feedline.format import pack
before = hwm()
pack(sys.argv[1], sys.argv[2], durable=False, workers=int(sys.argv[3]))
after = hwm()
print(json.dumps({"before_kib": before, "after_kib": after}))
"""


def _sparse(path: Path, size: int) -> None:
    """A file of ``size`` bytes that takes no disk space but a few written marks."""
    with open(path, "wb") as f:
        f.truncate(size)
        for at in (0, size // 3, size - 7):
            f.seek(at)
            f.write(b"feedline"[: min(8, size - at)])


def _peak_growth_mib(src: Path, out: Path, workers: int = 2) -> float:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    proc = subprocess.run([sys.executable, "-c", _PEAK, str(src), str(out), str(workers)],
                          capture_output=True, text=True, env=env, check=True, timeout=600)
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    return (doc["after_kib"] - doc["before_kib"]) / 1024


def _check_member(out: Path, key: str, field: str, path: Path) -> None:
    info = read_manifest(out).shards[0]
    index = load_index(out, info)
    i = index.keys.index(key)
    rec = next(r for r in index.sample_members(i) if index.fields[int(r["field"])] == field)
    size = int(rec["size"])
    assert size == path.stat().st_size
    with open(out / info.name, "rb") as shard, open(path, "rb") as src:
        shard.seek(int(rec["offset"]))
        left = size
        while left:
            n = min(left, 8 << 20)
            assert shard.read(n) == src.read(n)
            left -= n


def test_pack_memory_does_not_grow_with_file_size(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    _sparse(src / "big.bin", 384 << 20)  # read whole, this alone would add 384 MiB
    (src / "big.json").write_bytes(b"{}")
    (src / "small.bin").write_bytes(os.urandom(1000))
    growth = _peak_growth_mib(src, tmp_path / "ds")
    assert growth < 64, f"peak RSS grew by {growth:.0f} MiB packing a 384 MiB file"
    assert verify(tmp_path / "ds") == []
    _check_member(tmp_path / "ds", "big", "bin", src / "big.bin")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_pack_of_a_4_gib_file_stays_under_300_mib_peak_rss(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    _sparse(src / "huge.bin", 4 << 30)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    proc = subprocess.run([sys.executable, "-c", _PEAK, str(src), str(tmp_path / "ds"), "4"],
                          capture_output=True, text=True, env=env, check=True, timeout=900)
    peak_mib = json.loads(proc.stdout.strip().splitlines()[-1])["after_kib"] / 1024
    assert peak_mib < 300, f"peak RSS {peak_mib:.0f} MiB"
    assert verify(tmp_path / "ds") == []


@pytest.mark.parametrize("align", [0, 4096])
def test_streamed_members_equal_in_memory_ones_byte_for_byte(tmp_path: Path, align: int) -> None:
    big = os.urandom(STREAM_AT + 12345)
    (tmp_path / "big").write_bytes(big)
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.save(tmp_path / "a.npy", arr)
    npy = (tmp_path / "a.npy").read_bytes()
    streamed, held = tmp_path / "s.tar", tmp_path / "h.tar"
    with ShardWriter(streamed, align=align) as w:
        w.write_sample("k0", [("bin", FilePayload(str(tmp_path / "big"), len(big))), ("cls", b"3"),
                              ("npy", FilePayload(str(tmp_path / "a.npy"), len(npy)))])
        w.write_sample("k1", {"bin": b"tiny", "cls": b"4", "npy": npy})
    with ShardWriter(held, align=align) as w:
        w.write_sample("k0", [("bin", big), ("cls", b"3"), ("npy", npy)])
        w.write_sample("k1", {"bin": b"tiny", "cls": b"4", "npy": npy})
    assert streamed.read_bytes() == held.read_bytes()
    assert (tmp_path / "s.tar.idx").read_bytes() == (tmp_path / "h.tar.idx").read_bytes()
    index = ShardIndex.load(tmp_path / "s.tar.idx", shard_size=streamed.stat().st_size)
    assert index.fields == ["bin", "cls", "npy"]


@pytest.mark.parametrize("planned", [-1, +1])
def test_a_file_that_changes_size_while_streamed_aborts_the_shard(tmp_path: Path, planned: int) -> None:
    (tmp_path / "big").write_bytes(b"x" * (1 << 20))
    with pytest.raises(ReadError, match="changed size while it was packed") as e, \
            ShardWriter(tmp_path / "s.tar") as w:
        w.write_sample("k", {"bin": FilePayload(str(tmp_path / "big"), (1 << 20) + planned)})
    assert e.value.key == "k" and e.value.field == "bin"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big"]


def test_a_streamed_file_that_cannot_be_opened_is_refused_before_any_byte(tmp_path: Path) -> None:
    with ShardWriter(tmp_path / "s.tar") as w:
        w.write_sample("a", {"bin": b"1"})
        before = w.position
        with pytest.raises(ReadError, match="cannot read"):
            w.write_sample("b", {"bin": FilePayload(str(tmp_path / "gone"), 10)})
        assert w.position == before and w.num_samples == 1
    assert w.index is not None and w.index.keys == ["a"]


def test_pack_streams_large_files_and_reuses_them_by_content(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.bin").write_bytes(os.urandom(STREAM_AT + 1))
    (src / "b.bin").write_bytes(os.urandom(100))
    first = pack(src, tmp_path / "ds", workers=2)
    assert verify(tmp_path / "ds") == []
    _check_member(tmp_path / "ds", "a", "bin", src / "a.bin")
    ino = (tmp_path / "ds" / first.shards[0].name).stat().st_ino
    pack(src, tmp_path / "ds", workers=2)
    assert (tmp_path / "ds" / first.shards[0].name).stat().st_ino == ino  # reused
    data = bytearray((src / "a.bin").read_bytes())
    data[STREAM_AT // 2] ^= 1
    stat = (src / "a.bin").stat()
    (src / "a.bin").write_bytes(bytes(data))
    os.utime(src / "a.bin", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    pack(src, tmp_path / "ds", workers=2)
    _check_member(tmp_path / "ds", "a", "bin", src / "a.bin")
