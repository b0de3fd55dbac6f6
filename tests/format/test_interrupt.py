"""A pack killed with SIGKILL leaves no manifest pointing at a partial shard; a rerun finishes.

The child process stalls (blocks on an Event, from its progress callback) once
it has finished N shards and started the next one; the test polls for that
shard's temp file, then kills the child. No sleeps are used as synchronisation.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from feedline.format import MANIFEST_NAME, pack, read_manifest, verify

_CHILD = """
import sys, threading
from feedline.format import pack
stall_after = int(sys.argv[3])
seen = {}
def progress(p):
    if p.shards_done == stall_after:
        first = seen.setdefault("files", p.files_done)
        if p.files_done > first:  # a sample of the next shard is written
            threading.Event().wait()  # blocks forever: the parent kills us here
pack(sys.argv[1], sys.argv[2], shard_size=int(sys.argv[4]), align=4096, progress=progress)
"""
SHARD = 24 << 10


def _wait_for(path: Path, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"child exited ({proc.returncode}) before {path.name} appeared")
        if time.monotonic() > deadline:
            raise AssertionError(f"{path.name} did not appear")
        time.sleep(0.005)  # polling interval, not a synchronisation sleep


def _age(src: Path) -> None:
    """Date the sources in the past, so no shard looks older than them whatever the clock tick."""
    for path in src.rglob("*"):
        os.utime(path, ns=(1_000_000_000, 1_000_000_000))


def _kill_midway(src: Path, out: Path, stall_after: int) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(src), str(out), str(stall_after), str(SHARD)])
    try:
        _wait_for(out / f".shard-{stall_after:06d}.tar.partial", proc)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.timeout(120)
def test_killed_pack_leaves_no_manifest_and_rerun_reuses_complete_shards(make_src, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    src, _ = make_src(n=40)
    _age(src)
    ref = pack(src, tmp_path / "ref", shard_size=SHARD, align=4096)
    assert len(ref.shards) >= 4
    out = tmp_path / "out"
    _kill_midway(src, out, stall_after=2)
    assert not (out / MANIFEST_NAME).exists()
    with pytest.raises(Exception, match="no manifest"):
        read_manifest(out)
    done = [out / f"shard-{k:06d}.tar" for k in range(2)]
    assert all(p.exists() for p in done) and not (out / "shard-000002.tar").exists()
    inodes = [p.stat().st_ino for p in done]

    (out / ".shard-000099.tar.partial").write_bytes(b"left by an older interrupted run")
    manifest = pack(src, out, shard_size=SHARD, align=4096)
    assert [p.stat().st_ino for p in done] == inodes  # complete shards were reused, not rewritten
    assert manifest == ref
    for info in ref.shards:
        assert (out / info.name).read_bytes() == (tmp_path / "ref" / info.name).read_bytes()
    assert verify(out) == []
    assert not [p for p in out.iterdir() if p.name.endswith(".partial")]


@pytest.mark.timeout(120)
def test_killed_repack_removes_the_old_manifest_first(make_src, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    src, _ = make_src(n=40)
    out = tmp_path / "out"
    pack(src, out, shard_size=1 << 20)  # one big shard, a complete dataset
    _kill_midway(src, out, stall_after=1)  # repack into small shards, killed midway
    assert not (out / MANIFEST_NAME).exists()  # the old manifest would now point at a rewritten shard


@pytest.mark.timeout(120)
def test_cli_pack_killed_at_any_point_is_all_or_nothing(make_src, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    src, samples = make_src(n=60)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "feedline", "pack", str(src), "--out", str(out), "--shard-size", "16KiB", "-q"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not (out / "shard-000000.tar").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    if (out / MANIFEST_NAME).exists():  # it may have finished first: then it must be whole
        assert verify(out) == []
    manifest = pack(src, out, shard_size=16 << 10)
    assert manifest.num_samples == len(samples) and verify(out) == []


def test_rerun_rewrites_shards_whose_sources_changed(make_src, read_all, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    src, samples = make_src(n=30)
    _age(src)
    out = tmp_path / "out"
    first = pack(src, out, shard_size=SHARD)
    inodes = {s.name: (out / s.name).stat().st_ino for s in first.shards}
    key = sorted(samples)[-1]  # lives in the last shard
    new = bytes(reversed(samples[key]["json"]))  # same size, new content
    (src / f"{key}.json").write_bytes(new)
    second = pack(src, out, shard_size=SHARD)
    changed = [s.name for s in second.shards if (out / s.name).stat().st_ino != inodes[s.name]]
    assert changed == [first.shards[-1].name]
    assert read_all(out)[key]["json"] == new


@pytest.mark.parametrize("how", ["cp -p", "utime"])
def test_reuse_decides_by_content_not_dates(make_src, read_all, tmp_path: Path, how: str) -> None:  # type: ignore[no-untyped-def]
    """New bytes of the same size with an older mtime (cp -p, rsync -a, tar x) are never served stale."""
    src, samples = make_src(n=30)
    out = tmp_path / "out"
    first = pack(src, out, shard_size=SHARD)
    inodes = {s.name: (out / s.name).stat().st_ino for s in first.shards}
    key = sorted(samples)[0]  # lives in the first shard
    target = src / f"{key}.json"
    new = bytes(reversed(samples[key]["json"])) if samples[key]["json"][::-1] != samples[key]["json"] else b"X" * len(samples[key]["json"])
    assert len(new) == len(samples[key]["json"]) and new != samples[key]["json"]
    if how == "cp -p":
        staged = tmp_path / "staged.json"
        staged.write_bytes(new)
        os.utime(staged, ns=(1_000_000_000, 1_000_000_000))  # a file from 2001
        subprocess.run(["cp", "-p", str(staged), str(target)], check=True)
    else:
        before = target.stat()
        target.write_bytes(new)
        os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns - 10**9))
    assert target.stat().st_mtime_ns < (out / first.shards[0].name).stat().st_mtime_ns
    second = pack(src, out, shard_size=SHARD)
    rewritten = [s.name for s in second.shards if (out / s.name).stat().st_ino != inodes[s.name]]
    assert rewritten == [first.shards[0].name]  # the others were reused: their sources still match
    assert read_all(out)[key]["json"] == new
    assert verify(out) == []
