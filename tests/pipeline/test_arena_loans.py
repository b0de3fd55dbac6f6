"""Process workers on CPU lend arena slots to the batches (no copy out): a batch the loop
keeps is never overwritten, a loop that keeps every batch never stalls the workers, and a
slot whose batch is dropped goes back to them."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch
from loader_helpers import Numbers

import feedline
from feedline.pipeline.arena_loans import Loans


def test_loans_are_capped_and_come_back_through_the_pipe() -> None:
    loans = Loans(count=4, keep_free=2)
    try:
        assert loans.take(1) and loans.take(3) and not loans.take(2)  # cap: 4 - 2
        assert not loans.take(1)  # lent already
        loans.give_back(3)
        assert loans.returned() == [3] and loans.lent == {1} and loans.take(2)
    finally:
        loans.close()
    loans.give_back(1)  # after close: queued, no write to a closed descriptor


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_kept_batches_stay_intact_and_dropped_ones_return_their_slots() -> None:
    ds = Numbers(200)
    with feedline.Loader(ds, batch_size=8, workers=2, worker_type="process", seed=1) as loader:
        kept = list(loader)  # every batch held: more than the arena's slots
        for b in kept:
            assert torch.equal(b["x"][:, 0], b["y"].float())  # rows still the batch's own
        workers = loader._rt.pool_workers
        lent = set(workers.loans.lent)
        assert lent  # some batches were views of arena slots
        del kept, b
        gc.collect()
        for epoch in range(1, 3):  # dropped batches: their slots are free again
            loader.set_epoch(epoch)
            ids = [int(v) for b in loader for v in b["y"]]
            assert sorted(ids) == sorted(set(ids)) and len(ids) == 200
        assert len(workers.loans.lent) <= workers.loans.cap
        assert np.all(np.isin(list(lent), range(loader.stats["window"] + 1)))
