"""The global sample order and each rank's equal share of it, as batches.

The order of an epoch is a function of ``(seed, epoch)`` only: a numpy PCG64
permutation of ``range(n)`` seeded with ``[seed, epoch]`` (or ``range(n)``
when not shuffling). It does not depend on the number of ranks or workers.

Each rank gets an equal-length part (``order[rank::world]``) so a collective
never waits on a short rank; the parts are disjoint except for the wrap-around
below:

* ``drop_last=True``: the order is cut to a multiple of ``world *
  batch_size``; every rank gets the same number of full batches and the tail
  samples are not seen this epoch (they are, in another order, next epoch).
* ``drop_last=False``: the order is padded by wrapping around to a multiple of
  ``world``; each rank's last batch may be short (same length on every rank).
  The first ``(-n) % world`` samples of the order (at most ``world - 1``) are
  seen twice this epoch, on different ranks; no other sample is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from feedline.errors import ConfigError


@dataclass(frozen=True)
class Plan:
    """What one rank reads in one epoch."""

    epoch: int
    indices: np.ndarray
    """This rank's sample indices, in delivery order."""
    batch_size: int

    @property
    def num_batches(self) -> int:
        return -(-len(self.indices) // self.batch_size)

    def batch(self, b: int) -> list[int]:
        """The dataset indices of batch ``b``."""
        return [int(i) for i in self.indices[b * self.batch_size : (b + 1) * self.batch_size]]

    def refill(self, b: int, count: int) -> list[int]:
        """Deterministic replacements for bad samples of batch ``b``: up to ``count``
        indices that follow the batch in this rank's order, wrapping around."""
        n = len(self.indices)
        start = min((b + 1) * self.batch_size, n)
        return [int(self.indices[(start + k) % n]) for k in range(min(count, n))]


def global_order(n: int, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
    """The epoch's order of all ``n`` samples; identical on every rank."""
    if not shuffle:
        return np.arange(n, dtype=np.int64)
    rng = np.random.Generator(np.random.PCG64([seed, epoch]))
    return rng.permutation(n).astype(np.int64)


def rank_plan(
    n: int,
    *,
    seed: int,
    epoch: int,
    shuffle: bool,
    batch_size: int,
    drop_last: bool,
    rank: int,
    world: int,
) -> Plan:
    """This rank's indices for ``epoch`` (see the module docstring for the rules).

    Raises:
        ConfigError: ``n`` is too small to give every rank one batch with drop_last,
            or any argument is out of range.
    """
    if world < 1 or not 0 <= rank < world:
        raise ConfigError(f"rank must be in [0, world_size), got rank={rank} world_size={world}",
                          field="rank")
    if n < 1:
        raise ConfigError("the dataset is empty: there is nothing to load", field="dataset",
                          fix="check the dataset path or the filter that built it")
    order = global_order(n, seed, epoch, shuffle)
    if drop_last:
        per_rank = (n // world) // batch_size * batch_size
        if per_rank == 0:
            raise ConfigError(
                f"{n} samples cannot give {world} rank(s) one full batch of {batch_size}",
                field="batch_size", fix="lower batch_size or set drop_last=False"
            )
        order = order[: per_rank * world]
    else:
        total = -(-n // world) * world
        order = np.resize(order, total)  # wraps around
    return Plan(epoch=epoch, indices=order[rank::world], batch_size=batch_size)
