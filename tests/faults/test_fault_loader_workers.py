"""Loader workers under faults: /dev/shm arenas never outlive the training process, a
crash in any batch is a WorkerDied naming the signal, bad process options fail early.

Real processes and real signals: the parent is SIGKILLed at named points of worker
start-up (``kill_parent_child.py``), workers die of SIGSEGV (an invalid read through
ctypes), SIGKILL and ``os._exit``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from faults_helpers import CrashOn, Numbers, arenas, ids

import feedline
from feedline.errors import ConfigError, ResourceError, WorkerDied
from feedline.pipeline import shm

CHILD = Path(__file__).with_name("kill_parent_child.py")
ROOT = Path(__file__).resolve().parents[2]


def _run_child(shm_dir: Path, point: str) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, str(CHILD), str(shm_dir), point], env=env,
                          capture_output=True, text=True, timeout=100)


def _kill_case(point: str, tmp_path: Path) -> None:
    proc = _run_child(tmp_path, point)
    assert proc.returncode == -9, proc.stderr[-2000:]
    left = arenas(tmp_path)
    if point == "fallocate":
        # killed between creating the name and unlinking it (microseconds in real life):
        # the file names a dead owner, and the next arena created here removes it
        assert len(left) == 1
        assert shm.reap(str(tmp_path)) == [str(tmp_path / left[0])]
        assert arenas(tmp_path) == []
    else:
        assert left == [], f"killed at {point!r}, the arena stayed: {left}"


@pytest.mark.timeout(150)
@pytest.mark.parametrize("point", ["mapping"])
def test_kill_9_of_the_parent_during_worker_start_leaves_no_arena(point: str,
                                                                 tmp_path: Path) -> None:
    _kill_case(point, tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.parametrize("point", ["fallocate", "created", "release", "batch"])
def test_kill_9_of_the_parent_at_more_points_leaves_no_arena(point: str,
                                                            tmp_path: Path) -> None:
    _kill_case(point, tmp_path)


def test_an_arena_of_a_dead_owner_is_reaped_by_the_next_loader(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()  # a real pid whose process is gone
    stale = tmp_path / f"feedline-{dead.pid}-{'0' * 32}"
    stale.write_bytes(b"x" * 4096)
    alive = tmp_path / f"feedline-{1}-{'1' * 32}"  # pid 1 exists: not ours to remove
    alive.write_bytes(b"y")
    other = tmp_path / "feedline-notes.txt"  # not an arena name
    other.write_bytes(b"z")
    with feedline.Loader(Numbers(16), batch_size=4, workers=1, worker_type="process",
                         shm_dir=str(tmp_path), shuffle=False) as loader:
        assert ids(next(iter(loader))) == [0, 1, 2, 3]
        list(loader)
        assert not stale.exists()
        assert arenas(tmp_path) == [alive.name]  # and the running loader's name is gone
    assert other.exists() and alive.exists()


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_while_workers_run_the_arena_has_no_name(tmp_path: Path, method: str) -> None:
    """Workers open the unlinked arena through /proc/<parent>/fd/<fd>, also when they are
    children of the forkserver rather than of the training process."""
    with feedline.Loader(Numbers(32), batch_size=4, workers=2, worker_type="process",
                         shm_dir=str(tmp_path), shuffle=False, start_method=method) as loader:
        it = iter(loader)
        assert ids(next(it)) == [0, 1, 2, 3]
        assert arenas(tmp_path) == []
        assert [i for b in it for i in ids(b)] == list(range(4, 32))


@pytest.mark.parametrize("method", ["vfork", "nonsense"])
def test_an_unusable_start_method_is_refused_before_any_arena(method: str,
                                                             tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        feedline.Loader(Numbers(16), batch_size=4, workers=1, worker_type="process",
                        shm_dir=str(tmp_path), start_method=method)
    assert info.value.field == "start_method" and "spawn" in str(info.value)
    assert arenas(tmp_path) == []


def test_shm_dir_that_is_a_file_or_missing_is_a_resource_error(tmp_path: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("not a folder")
    for bad, words in ((a_file, "is not a directory"), (tmp_path / "nope", "does not exist")):
        with pytest.raises(ResourceError, match=words) as info:
            feedline.Loader(Numbers(16), batch_size=4, workers=1, worker_type="process",
                            shm_dir=str(bad))
        assert info.value.path == str(bad) and info.value.fix


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("how", "bad", "expect"), [
    ("segv", 0, "SIGSEGV"), ("segv", 9, "SIGSEGV"), ("kill", 13, "SIGKILL"),
    ("exit", 0, "exitcode=3")])
def test_a_crashing_worker_is_worker_died_and_leaves_no_arena(
        how: str, bad: int, expect: str, tmp_path: Path) -> None:
    loader = feedline.Loader(CrashOn(32, bad, how), batch_size=4, workers=2,
                             worker_type="process", shm_dir=str(tmp_path), shuffle=False,
                             timeout=60)
    with pytest.raises(WorkerDied) as info:
        list(loader)
    assert expect in str(info.value)
    loader.close()
    assert arenas(tmp_path) == []
