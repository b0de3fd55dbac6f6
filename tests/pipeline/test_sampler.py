"""Order is a function of (seed, epoch); ranks get disjoint, equal-length parts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from feedline.pipeline.sampler import global_order, rank_plan


def test_order_depends_on_seed_and_epoch_only() -> None:
    a = global_order(100, seed=3, epoch=1, shuffle=True)
    assert np.array_equal(a, global_order(100, seed=3, epoch=1, shuffle=True))
    assert not np.array_equal(a, global_order(100, seed=3, epoch=2, shuffle=True))
    assert not np.array_equal(a, global_order(100, seed=4, epoch=1, shuffle=True))
    assert sorted(a.tolist()) == list(range(100))
    assert global_order(5, seed=3, epoch=1, shuffle=False).tolist() == [0, 1, 2, 3, 4]


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 300), world=st.integers(1, 6), bs=st.integers(1, 9),
       drop_last=st.booleans(), epoch=st.integers(0, 3))
def test_ranks_disjoint_equal_and_complete(n: int, world: int, bs: int, drop_last: bool,
                                           epoch: int) -> None:
    if drop_last and (n // world) // bs == 0:
        with pytest.raises(ValueError, match="drop_last"):
            rank_plan(n, seed=1, epoch=epoch, shuffle=True, batch_size=bs, drop_last=True,
                      rank=0, world=world)
        return
    plans = [rank_plan(n, seed=1, epoch=epoch, shuffle=True, batch_size=bs,
                       drop_last=drop_last, rank=r, world=world) for r in range(world)]
    lengths = {len(p.indices) for p in plans}
    assert len(lengths) == 1  # equal length: collectives never wait on a short rank
    assert len({p.num_batches for p in plans}) == 1
    flat = np.concatenate([p.indices for p in plans])
    order = global_order(n, 1, epoch, True)
    if drop_last:
        assert len(set(flat.tolist())) == len(flat)  # disjoint
        assert all(len(p.batch(b)) == bs for p in plans for b in range(p.num_batches))
        # the global order, interleaved across ranks, is a prefix of the epoch order
        inter = np.stack([p.indices for p in plans], axis=1).reshape(-1)
        assert np.array_equal(inter, order[: len(inter)])
    else:
        assert set(flat.tolist()) == set(range(n))  # nothing dropped; wrap pads < world
        assert len(flat) - n < world


def test_refill_follows_the_batch_and_wraps() -> None:
    plan = rank_plan(10, seed=0, epoch=0, shuffle=False, batch_size=4, drop_last=True,
                     rank=0, world=1)
    assert plan.batch(1) == [4, 5, 6, 7]
    assert plan.refill(0, 3) == [4, 5, 6]
    assert plan.refill(1, 3) == [0, 1, 2]  # wraps around the rank's order
