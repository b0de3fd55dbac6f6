"""Loader settings at their extremes: a prefetch far beyond what the memory budget holds,
more process workers than cores, more ranks than samples.

What is guaranteed: batches in flight (being prepared, or finished and waiting for the
consumer) fit ``pinned_budget``: once batch 0 gives the batch size in bytes,
``workers + prefetch`` is lowered to what the budget holds (one batch at least), reported
as ``stats["window"]``. Before, the slot pool bounded only the slots being filled:
``prefetch=1000`` with 4 MiB batches and a 64 MiB budget decoded the whole epoch ahead on
CPU (843 MiB resident) and reserved a 4 GiB arena in /dev/shm with process workers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from faults_helpers import Numbers, ids

import feedline
from feedline.cores import usable_cores
from feedline.errors import ConfigError
from feedline.pipeline.options import OversubscribedWarning

ROOT = Path(__file__).resolve().parents[2]
HELPERS = Path(__file__).resolve().parent


class Rows(Numbers):
    """Sample i: 64 KiB of float32 filled with i."""

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"x": np.full((1 << 14,), i, np.float32), "y": i}


BATCH_BYTES = 4 * ((1 << 16) + 8)  # 4 samples: the rows and the int64 label


@pytest.mark.parametrize(("prefetch", "budget", "window"), [
    (1000, 8 * BATCH_BYTES, 8),      # the budget binds: 8 batches, not 1002
    (1000, BATCH_BYTES, 1),          # one batch fits: one in flight
    (2, 1 << 30, 4),                 # the budget does not bind: workers + prefetch
])
def test_batches_in_flight_fit_the_pinned_budget(prefetch: int, budget: int, window: int) -> None:
    with feedline.Loader(Rows(96), batch_size=4, workers=2, prefetch=prefetch,
                         pinned_budget=budget, shuffle=False) as loader:
        got = [i for b in loader for i in ids(b)]
        assert loader.stats["window"] == window
    assert got == list(range(96))


ARENA = r"""
import os, sys
sys.path.insert(0, sys.argv[1])
from test_fault_loader_extremes import Rows, BATCH_BYTES
import feedline

def arena_bytes():
    total = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
            if os.path.basename(target).startswith("feedline-"):
                total += os.fstat(int(fd)).st_size
        except OSError:
            pass
    return total

if __name__ == "__main__":
    with feedline.Loader(Rows(96), batch_size=4, workers=2, prefetch=1000, worker_type="process",
                         pinned_budget=8 * BATCH_BYTES, shuffle=False) as loader:
        it = iter(loader)
        first = next(it)
        print("ARENA", arena_bytes(), "BUDGET", 8 * BATCH_BYTES)
        n = len(first["y"]) + sum(len(b["y"]) for b in it)
    print("SAMPLES", n)
"""


@pytest.mark.slow  # process workers start in a few seconds on 2 busy cores
@pytest.mark.timeout(120)
def test_the_process_workers_arena_fits_the_pinned_budget(tmp_path: Path) -> None:
    script = tmp_path / "arena.py"
    script.write_text(ARENA)
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{HELPERS}"}
    res = subprocess.run([sys.executable, str(script), str(HELPERS)], env=env,
                         capture_output=True, text=True, timeout=110)
    assert res.returncode == 0, res.stderr[-3000:]
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("ARENA"))
    arena, budget = int(line.split()[1]), int(line.split()[3])
    assert 0 < arena <= budget + (1 << 16), line  # before: 1002 slots, 256 MiB
    assert "SAMPLES 96" in res.stdout, res.stdout


def test_more_process_workers_than_cores_is_said_not_capped() -> None:
    cores = usable_cores()
    with pytest.warns(OversubscribedWarning, match=rf"workers={cores + 1} processes on {cores}"):
        loader = feedline.Loader(Numbers(16), batch_size=4, workers=cores + 1,
                                 worker_type="process")
    assert loader.workers == cores + 1  # what was asked for: not capped
    loader.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # threads (I/O-bound decodes want many) are not warned about
        feedline.Loader(Numbers(16), batch_size=4, workers=64, worker_type="thread").close()
        feedline.Loader(Numbers(16), batch_size=4, workers=cores, worker_type="process").close()


@pytest.mark.parametrize(("n", "world"), [(3, 8), (1, 4)])
def test_more_ranks_than_samples_with_drop_last_false(n: int, world: int) -> None:
    """Each rank gets one batch of one sample; the order wraps around as often as needed,
    so a sample is read by several ranks (here up to 3 times) but none is lost."""
    seen = []
    for rank in range(world):
        with feedline.Loader(Numbers(n), batch_size=2, rank=rank, world_size=world,
                             drop_last=False, shuffle=False, workers=1) as loader:
            batches = [ids(b) for b in loader]
        assert len(batches) == 1 and len(batches[0]) == 1
        seen += batches[0]
    assert sorted(set(seen)) == list(range(n)) and len(seen) == world


def test_more_ranks_than_samples_with_drop_last_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="cannot give 8 rank"):
        feedline.Loader(Numbers(3), batch_size=2, rank=0, world_size=8)
