"""Round 12 of hostile inputs (issue 13): resource limits, long runs and leaks, two
processes on one dataset folder, distributed arguments, and Ctrl-C as a batch dies
(``sweep_round12.py``, run by ``hostile_sweep.py``). A quick test for each failure the
round found; the slot-return interrupt has its own in ``tests/pipeline/test_slots_wrap.py``."""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from faults_helpers import Numbers

import feedline
from feedline.errors import ConfigError, ResourceError
from feedline.pipeline import collate, jobs, shm
from feedline.pipeline.options import UnshardedWarning
from feedline.pipeline.slots import SlotPool
from feedline.pipeline.source import Item


@pytest.mark.timeout(30)
def test_a_loader_of_one_rank_of_a_torchrun_job_given_no_rank_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: with WORLD_SIZE=2 (torchrun) and no process_group=/rank=/world_size=, every rank
    read the whole dataset in the same order, silently (the Loader does not read RANK)."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    with pytest.warns(UnshardedWarning, match="process_group="):
        loader = feedline.Loader(Numbers(8), batch_size=2, workers=1, shuffle=False)
    assert (loader.rank, loader.world_size) == (0, 1)  # the environment does not decide
    loader.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnshardedWarning)
        feedline.Loader(Numbers(8), batch_size=2, workers=1, world_size=1).close()  # meant
        monkeypatch.setenv("WORLD_SIZE", "1")
        feedline.Loader(Numbers(8), batch_size=2, workers=1).close()
        monkeypatch.setenv("WORLD_SIZE", "abc")
        feedline.Loader(Numbers(8), batch_size=2, workers=1).close()


@contextlib.contextmanager
def _address_space(room: int) -> Iterator[None]:
    """A real RLIMIT_AS (``ulimit -v``) ``room`` bytes above what this process maps now, for
    the block only."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    mapped = int(Path("/proc/self/statm").read_text().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (mapped + room, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _big_layout() -> collate.Layout:
    return collate.infer_layout([{"x": np.zeros(1 << 24, np.float32)}], 8, 1)  # 512 MiB a slot


@pytest.mark.timeout(30)
def test_a_batch_slot_past_the_memory_limit_is_a_resource_error_naming_the_limit() -> None:
    """Before: a raw ``RuntimeError`` "DefaultCPUAllocator: can't allocate memory" from thread
    workers (``as-slots-thread``), nothing said about the limit or what to lower."""
    pool = SlotPool(1 << 40, pin=False, reuse=False)
    pool.configure(_big_layout())
    with _address_space(64 << 20), pytest.raises(ResourceError, match="batch slot 1") as err:
        pool.acquire()
    assert "RLIMIT_AS" in err.value.fix and "batch_size" in err.value.fix
    assert pool.allocated_bytes == 0  # nothing counted for the slot that failed
    pool.close()


@pytest.mark.timeout(30)
def test_an_arena_past_the_memory_limit_is_a_resource_error(tmp_path: Path) -> None:
    """Before: a raw ``OSError`` "Cannot allocate memory" from ``mmap`` of the process
    workers' arena (``as-slots-process``)."""
    spec = shm.create(str(tmp_path), _big_layout(), 1)
    try:
        with _address_space(64 << 20), pytest.raises(ResourceError, match="cannot map") as err:
            shm.Arena(spec)
        assert "RLIMIT_AS" in err.value.fix
    finally:
        shm.release(spec)
    assert os.listdir(tmp_path) == []


@pytest.mark.timeout(30)
def test_a_memory_error_in_a_worker_says_the_limit_not_skip_the_sample() -> None:
    """Before: "fix the sample or the function, or pass on_error='skip'" for a worker out of
    memory: the sample is not at fault."""
    with _address_space(64 << 20):
        with pytest.raises(MemoryError) as caught:
            np.ones(1 << 28, np.float32)
        err = jobs.worker_error(caught.value, Item(3, "k3", "shard-000000.tar"), "decode", "worker_0")
    assert err.place["key"] == "k3" and "RLIMIT_AS" in err.fix and "batch_size" in err.fix
    assert "skip" not in err.fix


@pytest.mark.timeout(30)
def test_an_iterator_replaced_by_a_newer_one_says_so() -> None:
    """Before: the replaced iterator ended quietly, so ``zip(loader, loader)`` ran no step and a
    second stream (a mixup partner) stopped the first. The newer one goes on with the epoch."""
    with feedline.Loader(Numbers(16), batch_size=4, workers=1, shuffle=False) as loader:
        first = iter(loader)
        assert next(first)["y"].tolist() == [0, 1, 2, 3]
        second = iter(loader)
        assert [v for b in second for v in b["y"].tolist()] == list(range(4, 16))
        with pytest.raises(ConfigError, match="replaced by a newer iter"):
            next(first)
        with pytest.raises(ConfigError, match="second Loader"):
            list(zip(loader, loader, strict=False))
        loader.set_epoch(1)  # set_epoch abandons a pass: it ends quietly, as before
        third = iter(loader)
        next(third)
        loader.set_epoch(2)
        assert next(third, None) is None


NPROC = """
import os, resource, sys
from feedline.errors import ResourceError
from feedline.pipeline import workers_process, workers_thread

resource.setrlimit(resource.RLIMIT_NPROC, (1, 1))  # this process alone: no thread, no fork more
try:
    workers_thread.ThreadWorkers(4, lambda job, name: None)
except ResourceError as e:
    print("THREAD", e.place.get("field"), "|", e, "|", e.fix)
try:
    os.fork()
except OSError as e:
    err = workers_process._out_of_descriptors(e, 0, 4)
    print("PROCESS", type(err).__name__, "|", err, "|", getattr(err, "fix", ""))
"""


@pytest.mark.timeout(60)
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="RLIMIT_NPROC binds a user other than root: needs root to become nobody")
def test_workers_past_the_process_limit_are_a_resource_error_naming_it(tmp_path: Path) -> None:
    """Before: a raw ``RuntimeError`` "can't start new thread" (thread workers) or
    ``BlockingIOError`` "Resource temporarily unavailable" from fork (process workers) at
    ``ulimit -u`` (``nproc-3-process-4`` of the sweep). Run as user nobody, whom the limit binds."""
    os.chmod(tmp_path, 0o777)
    res = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=+dac_read_search",
         "--ambient-caps=+dac_read_search", sys.executable, "-c", NPROC],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")},
        capture_output=True, text=True, timeout=50, cwd=tmp_path)
    lines = {ln.split()[0]: ln for ln in res.stdout.splitlines()}
    assert "THREAD" in lines and "PROCESS" in lines, (res.stdout, res.stderr[-2000:])
    for line in lines.values():
        assert "ulimit -u" in line and "RLIMIT_NPROC" in line and "lower workers=" in line, line
    assert "ResourceError" in lines["PROCESS"]
