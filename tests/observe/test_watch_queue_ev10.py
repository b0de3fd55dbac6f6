"""feedline.watch reports a feedline.Loader's queue as loader.stats counts it: how full the
window was when the loop asked for a batch, and the producers' waits on the pinned budget."""

from __future__ import annotations

import time

import numpy as np
import pytest

import feedline
from feedline.observe._export import render_text


class _Slow:
    """Samples that take a while to make on some indices: the loop finds the window empty."""

    def __len__(self) -> int:
        return 96

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        if i % 24 == 0:
            time.sleep(0.01)
        return {"x": np.full(64, i, np.float32)}


@pytest.mark.timeout(60)
def test_watch_reports_occupancy_and_budget_waits_as_the_loader_counts_them() -> None:
    loader = feedline.Loader(_Slow(), batch_size=4, workers=2, prefetch=2, shuffle=False)
    watched = feedline.watch(loader, name="queue")
    for _ in watched:
        time.sleep(0.002)
    rep = watched.report()
    stats = loader.stats
    loader.close()
    q = rep.loader["queue"]
    assert q["batches"] == stats["batches"] == 24
    assert q["occupancy"] == pytest.approx(stats["occupancy"], abs=1e-3)
    assert q["starved_batches"] == stats["starved_batches"]
    assert (q["budget_waits"], q["budget_wait_s"]) == (stats["budget_waits"], pytest.approx(stats["budget_wait_s"], abs=1e-5))
    assert "queue: window" in render_text(rep)


@pytest.mark.timeout(60)
def test_other_loaders_have_no_queue_figures() -> None:
    watched = feedline.watch([{"x": np.zeros(3)}] * 12, name="plain")
    for _ in watched:
        pass
    rep = watched.report()
    assert "queue" not in rep.loader and "queue: window" not in render_text(rep)
