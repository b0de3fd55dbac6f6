"""The open shard handles of one dataset stay within its budget while threads read at once.

Before: each opening thread checked the count, then opened; threads opening shards at
the same moment all saw room and all opened, so a loader's workers left the dataset one
handle per thread over the budget (``ulimit -n 64``: 17 held where the budget is 16).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

import feedline
from feedline.format import pack


@pytest.mark.timeout(60)
def test_threads_opening_shards_at_once_stay_within_the_budget(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for i in range(64):
        (src / f"s{i:04d}.bin").write_bytes(os.urandom(700))
    pack(src, tmp_path / "ds", shard_size=1024)  # one sample per shard
    ds = feedline.open_dataset(tmp_path / "ds")
    budget = ds._state().handles  # the budget the dataset's reads go through
    budget.limit = 12  # more than the threads: room can always be made
    peak = 0
    peak_lock = threading.Lock()
    start = threading.Barrier(8)

    def reader(offset: int) -> None:
        nonlocal peak
        start.wait()
        for rnd in range(20):
            for i in range(offset, len(ds), 8):
                ds[(i + rnd * 3) % len(ds)]
                with peak_lock:
                    peak = max(peak, len(budget))

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(budget) <= budget.limit
    assert peak <= budget.limit, f"{peak} handles open at once, budget {budget.limit}"
