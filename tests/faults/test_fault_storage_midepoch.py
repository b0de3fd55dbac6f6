"""Storage that changes under a running loader, after its first batch: a shard truncated,
rewritten in place (same size, new bytes), deleted, replaced, or the whole folder
re-packed by a concurrent ``feedline pack`` into the same place.

What is guaranteed, for thread and process workers: the loader ends in a typed error that
names the shard and carries the storage's fix (before: a deleted shard said "fix the sample
or the function"); bytes rewritten in place are caught with ``verify=True`` (and by
``feedline verify``); nothing hangs. With ``verify=False`` a same-size rewrite in place is
read as it now is: the documented price of unverified reads (docs/faults.md).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import feedline
from feedline.errors import FeedlineError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("midepoch") / "src"
    src.mkdir()
    for i in range(24):
        (src / f"s{i:02d}.bin").write_bytes(os.urandom(3000))
    return src


def _dataset(source: Path, where: Path) -> Path:
    from feedline.format import pack

    pack(source, where, shard_size=8 << 10)  # 3 samples a shard: 8 shards
    return where


def _change(mode: str, ds: Path, source: Path) -> None:
    shards = sorted(ds.glob("*.tar"))
    last = shards[-1]
    if mode == "truncate":
        os.truncate(last, 1024)
    elif mode == "rewrite":  # same size, new bytes, same inode
        with open(last, "r+b") as f:
            f.write(os.urandom(last.stat().st_size))
    elif mode == "delete":
        for s in shards[1:]:
            s.unlink()
    elif mode == "replace":
        shutil.copy(last, str(last) + ".new")
        os.replace(str(last) + ".new", last)
    elif mode == "repack":  # a concurrent `feedline pack` into the same folder, other shard size
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        subprocess.run([sys.executable, "-m", "feedline", "pack", str(source), "--out", str(ds),
                        "--shard-size", "20KB"], check=True, capture_output=True, env=env, timeout=60)


CASES = [("truncate", False), ("delete", False), ("replace", False), ("repack", False), ("rewrite", True)]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("worker_type", ["thread", pytest.param("process", marks=pytest.mark.slow)])
@pytest.mark.parametrize(("mode", "verify"), CASES)
def test_storage_changed_mid_epoch_is_a_placed_error_with_the_storage_fix(
        source: Path, tmp_path: Path, mode: str, verify: bool, worker_type: str) -> None:
    ds_dir = _dataset(source, tmp_path / "ds")
    ds = feedline.open_dataset(ds_dir, verify=verify)
    with feedline.Loader(ds, batch_size=3, workers=2, worker_type=worker_type, shuffle=False,
                         prefetch=1) as loader:
        it = iter(loader)
        next(it)  # the loader runs; its first shard is read
        _change(mode, ds_dir, source)
        with pytest.raises(FeedlineError) as info:
            for _ in it:
                pass
    err = info.value
    text = str(err)
    assert err.shard and err.shard.startswith("shard-"), text
    assert err.fix and "fix the sample or the function" not in err.fix, text
    assert "Traceback" not in text


REPACKER = """
import random, sys, time
from feedline.format import pack
end = time.monotonic() + float(sys.argv[3])
while time.monotonic() < end:
    pack(sys.argv[1], sys.argv[2], shard_size=random.choice([4, 8, 16, 32]) << 10)
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seconds", [3.0, pytest.param(30.0, marks=pytest.mark.slow)])
def test_reading_while_another_process_repacks_never_returns_wrong_bytes(
        source: Path, tmp_path: Path, seconds: float) -> None:
    """Open and read every sample, again and again, while ``pack`` rewrites the folder
    with other shard sizes: each attempt reads the right bytes or raises a FeedlineError."""
    want = {p.stem: p.read_bytes() for p in source.glob("*.bin")}
    ds_dir = _dataset(source, tmp_path / "ds")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    writer = subprocess.Popen([sys.executable, "-c", REPACKER, str(source), str(ds_dir), str(seconds)],
                              env=env)
    whole = failed = 0
    try:
        while writer.poll() is None or whole == 0:
            try:
                ds = feedline.open_dataset(ds_dir)
                for i in range(len(ds)):
                    sample = ds[i]
                    assert bytes(sample["bin"]) == want[sample["__key__"]], sample["__key__"]
                whole += 1
            except FeedlineError:
                failed += 1
    finally:
        writer.kill()
        writer.wait()
    assert whole > 0 and writer.returncode in (0, -9)
