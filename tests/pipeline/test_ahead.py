"""The next epoch's first batches are prepared while the last ones of this epoch are used."""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest
from loader_helpers import Numbers, batch_ids

import feedline
from feedline.pipeline import _dropped, sampler


def _order(epoch: int, n: int = 32, batch: int = 4, seed: int = 2) -> list[list[int]]:
    plan = sampler.rank_plan(n, seed=seed, epoch=epoch, shuffle=True, batch_size=batch,
                             drop_last=True, rank=0, world=1)
    return [plan.batch(b) for b in range(plan.num_batches)]


class Watch:
    """A transform that counts samples and signals once a later epoch's sample is prepared."""

    def __init__(self, per_epoch: int) -> None:
        self.per_epoch, self.count = per_epoch, 0
        self.lock = threading.Lock()
        self.next_epoch_started = threading.Event()

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.count += 1
            if self.count > self.per_epoch:
                self.next_epoch_started.set()
        return sample


@pytest.mark.timeout(60)
@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_next_epoch_is_prepared_before_it_is_asked_for_and_used(worker_type: str) -> None:
    watch = Watch(32)
    with feedline.Loader(Numbers(32), batch_size=4, workers=2, prefetch=2, seed=2,
                         worker_type=worker_type,
                         transform=watch if worker_type == "thread" else None) as loader:
        got = []
        for epoch in range(3):
            loader.set_epoch(epoch)
            got.append([batch_ids(b) for b in loader])
            if epoch == 0 and worker_type == "thread":
                # epoch 1 has not been asked for, yet its first batches are being prepared
                assert watch.next_epoch_started.wait(20)
        assert got == [_order(0), _order(1), _order(2)]
        assert loader.stats["batches"] == 24
        assert loader.wait_idle(20)  # epoch 3's batches, prepared ahead, are done
        if worker_type == "thread":
            assert watch.count == 3 * 32 + 2 * 4  # one batch of 4 per worker ahead


@pytest.mark.timeout(60)
def test_without_set_epoch_the_same_epoch_is_prepared_again() -> None:
    watch = Watch(32)
    with feedline.Loader(Numbers(32), batch_size=4, workers=2, prefetch=2, seed=2,
                         transform=watch) as loader:
        first = [batch_ids(b) for b in loader]
        assert watch.next_epoch_started.wait(20)  # the next pass is being prepared
        assert [batch_ids(b) for b in loader] == first == _order(0)
        assert watch.count <= 2 * 32 + 4 * 4  # the prepared batches were used, not redone


@pytest.mark.timeout(60)
def test_batches_prepared_ahead_are_dropped_when_another_pass_comes() -> None:
    with feedline.Loader(Numbers(32), batch_size=4, workers=2, prefetch=2, seed=2) as loader:
        first = [batch_ids(b) for b in loader]
        again = [batch_ids(b) for b in loader]  # no set_epoch: the same epoch once more
        assert first == again == _order(0)
        loader.set_epoch(5)  # not the epoch that was prepared ahead
        assert [batch_ids(b) for b in loader] == _order(5)
        loader.set_epoch(6)
        it = iter(loader)
        assert batch_ids(next(it)) == _order(6)[0]
        state = loader.state_dict()
    with feedline.Loader(Numbers(32), batch_size=4, workers=2, prefetch=2, seed=2) as other:
        other.set_epoch(6)
        [batch_ids(b) for b in other]  # prepares epoch 7 ahead, which the state must override
        other.load_state_dict(state)
        other.set_epoch(6)
        assert [batch_ids(b) for b in other] == _order(6)[1:]


@pytest.mark.timeout(120)
def test_loaders_dropped_with_batches_prepared_ahead_leave_nothing_behind() -> None:
    def snapshot() -> tuple[int, int]:
        assert _dropped.settle(60)  # dropped loaders are closed on feedline's closer thread
        return len(os.listdir("/proc/self/fd")), threading.active_count()

    def once() -> None:
        loader = feedline.Loader(Numbers(16), batch_size=4, workers=2, seed=1)
        assert len([b for b in loader]) == 4  # the whole epoch: epoch 1 is now in flight

    once()
    before = snapshot()
    for _ in range(100):
        once()
    after = snapshot()
    assert after[0] <= before[0] and after[1] <= before[1]
