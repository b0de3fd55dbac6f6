"""Order is a function of (seed, epoch); ranks get disjoint, equal-length parts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from feedline.pipeline.sampler import Permutation, Plan, global_order, rank_plan


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


@pytest.mark.parametrize("n", [1, 2, 3, 5, 17, 1000, 4097, 65_537])
def test_the_computed_order_is_a_permutation_keyed_by_seed_and_epoch(n: int) -> None:
    """The order used above LAZY_ORDER_ABOVE samples, checked whole at small sizes: every
    index exactly once, the same for the same (seed, epoch), another for another epoch."""
    pos = np.arange(n, dtype=np.int64)
    a = Permutation(n, seed=3, epoch=1)[pos]
    assert a.dtype == np.int64 and sorted(a.tolist()) == list(range(n))
    assert np.array_equal(a, Permutation(n, seed=3, epoch=1)[pos])
    if n >= 17:
        assert not np.array_equal(a, Permutation(n, seed=3, epoch=2)[pos])
        assert not np.array_equal(a, Permutation(n, seed=4, epoch=1)[pos])
        assert not np.array_equal(a, pos)
        # shuffled, not shifted: neighbours in the order are far apart in the dataset
        assert np.median(np.abs(np.diff(a))) > n / 10
    assert np.array_equal(a[[5 % n, 0]], Permutation(n, 3, 1)[np.array([5 % n, 0])])


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 1500), world=st.integers(1, 5), bs=st.integers(1, 9), drop_last=st.booleans())
def test_ranks_of_a_computed_order_follow_the_same_rules(n: int, world: int, bs: int, drop_last: bool) -> None:
    """The lazy plan gives each rank exactly what slicing the materialised order gives."""
    if drop_last and (n // world) // bs == 0:
        return
    for rank in range(world):
        lazy = Plan(epoch=0, order=Permutation(n, 1, 0), rank=rank, world=world,
                    length=rank_plan(n, seed=1, epoch=0, shuffle=True, batch_size=bs, drop_last=drop_last,
                                     rank=rank, world=world).length, batch_size=bs)
        full = Permutation(n, 1, 0)[np.arange(n)]
        want = full[: (n // world) // bs * bs * world] if drop_last else np.resize(full, -(-n // world) * world)
        assert lazy.indices.tolist() == want[rank::world].tolist()
        assert [i for b in range(lazy.num_batches) for i in lazy.batch(b)] == lazy.indices.tolist()


@pytest.mark.timeout(20)
def test_a_dataset_of_every_window_of_a_token_file_plans_in_constant_memory() -> None:
    """nanoGPT's train.bin read as every window start: 10^12 indices. A permutation array
    would be 8 TB; the plan and its batches take microseconds."""
    n = 10**12
    plans = [rank_plan(n, seed=0, epoch=2, shuffle=True, batch_size=64, drop_last=True, rank=r, world=2)
             for r in range(2)]
    assert plans[0].num_batches == n // 2 // 64
    batches = [p.batch(b) for p in plans for b in (0, 1, plans[0].num_batches - 1)]
    flat = [i for b in batches for i in b]
    assert all(0 <= i < n for i in flat) and len(set(flat)) == len(flat) == 6 * 64
    assert batches[0] == rank_plan(n, seed=0, epoch=2, shuffle=True, batch_size=64, drop_last=True,
                                   rank=0, world=2).batch(0)
    assert rank_plan(n, seed=0, epoch=0, shuffle=False, batch_size=4, drop_last=False, rank=1,
                     world=3).batch(1) == [13, 16, 19, 22]
    assert plans[1].refill(plans[1].num_batches - 1, 2) == plans[1].batch(0)[:2]  # wraps


def test_length_buckets_give_every_rank_batches_of_similar_lengths_once_each() -> None:
    """``lengths=`` (round 13, speech padded per batch): random batches of clips of 0.5-4 s
    padded to their longest were 58 % audio; length-bucketed ones 98 %."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(8_000, 64_000, 2000)
    plans = [rank_plan(2000, seed=1, epoch=0, shuffle=True, batch_size=16, drop_last=True, rank=r, world=2,
                       lengths=lengths) for r in (0, 1)]
    seen = np.concatenate([p.indices for p in plans])
    assert len(seen) == len(set(seen.tolist())) == 2000 // 32 * 32  # disjoint, whole batches
    spread = [np.ptp(lengths[p.batch(b)]) for p in plans for b in range(p.num_batches)]
    plain = rank_plan(2000, seed=1, epoch=0, shuffle=True, batch_size=16, drop_last=True, rank=0, world=2)
    random_spread = np.median([np.ptp(lengths[plain.batch(b)]) for b in range(plain.num_batches)])
    assert np.median(spread) * 20 < random_spread
    # both ranks' batch b come from one sorted span of the order: alike across ranks too (DDP waits less)
    assert max(np.ptp(lengths[plans[0].batch(b) + plans[1].batch(b)]) for b in range(plans[0].num_batches)) * 5 \
        < random_spread
    again = rank_plan(2000, seed=1, epoch=0, shuffle=True, batch_size=16, drop_last=True, rank=0, world=2,
                      lengths=lengths)
    later = rank_plan(2000, seed=1, epoch=1, shuffle=True, batch_size=16, drop_last=True, rank=0, world=2,
                      lengths=lengths)
    assert np.array_equal(again.indices, plans[0].indices) and not np.array_equal(later.indices, plans[0].indices)
    ordered = rank_plan(2000, seed=1, epoch=0, shuffle=False, batch_size=16, drop_last=False, rank=0, world=1,
                        lengths=lengths)
    assert np.all(np.diff(lengths[ordered.indices]) >= 0)  # evaluation: sorted by length
