"""The loader's resumable position: small, JSON-serialisable, validated on load.

The position counts *delivered* batches only. Batches still in flight when
``state_dict()`` is called are not delivered, so a resumed loader produces
them again: nothing lost, nothing repeated. With ``in_order=False`` batches
arrive out of order, so the position is a prefix count plus the (few, bounded
by the prefetch window) batch ids delivered beyond it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from feedline.errors import StateError

VERSION = 1
# Fields that must match between the saved loader and the one loading the state.
IDENTITY = ("fingerprint", "seed", "batch_size", "world_size", "rank", "shuffle", "drop_last")


@dataclass
class Position:
    """Which batches of ``epoch`` have been delivered to the user."""

    epoch: int = 0
    prefix: int = 0
    """Batches ``0 .. prefix-1`` are delivered."""
    extra: set[int] = field(default_factory=set)
    """Delivered batch ids ``>= prefix`` (out-of-order mode only)."""

    def mark(self, batch_id: int) -> None:
        """Record batch ``batch_id`` as delivered."""
        self.extra.add(batch_id)
        while self.prefix in self.extra:
            self.extra.discard(self.prefix)
            self.prefix += 1

    def remaining(self, num_batches: int) -> Sequence[int]:
        """Batch ids of this epoch not delivered yet, in order (a ``range`` unless batches
        were delivered out of order: an epoch of 10^8 batches costs no list)."""
        if not self.extra:
            return range(self.prefix, num_batches)
        return [b for b in range(self.prefix, num_batches) if b not in self.extra]

    def done(self, num_batches: int) -> bool:
        return self.prefix >= num_batches


def to_dict(identity: dict[str, Any], pos: Position, counters: dict[str, int]) -> dict[str, Any]:
    """The JSON form of a loader's state."""
    return {
        "version": VERSION,
        **identity,
        "epoch": pos.epoch,
        "batches_done": pos.prefix,
        "extra_done": sorted(pos.extra),
        "counters": dict(counters),
    }


MAX_EPOCH = 2**31 - 1
"""Epochs beyond this are taken as a corrupt state (set_epoch has no use for them)."""
COUNTERS = ("batches", "skipped")


def _fail(message: str, key: str, fix: str = "pass the dict returned by Loader.state_dict() "
          "of the run to resume, unchanged") -> StateError:
    return StateError(message, field=key, fix=fix)


def _strict_int(state: Mapping[str, Any], key: str, low: int, high: int,
                label: str | None = None) -> int:
    """``state[key]`` as an int in ``[low, high]``; bools, floats and strings are refused.
    Errors name ``label`` (default ``key``)."""
    label = label or key
    if key not in state:
        raise _fail(f"loader state has no {label!r}", label)
    value = state[key]
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise _fail(f"loader state's {label} must be an integer, got {value!r}", label)
    if not low <= value <= high:
        raise _fail(f"loader state's {label}={value} is outside [{low}, {high}]", label)
    return int(value)


def _same(saved: Any, mine: Any) -> bool:
    """Equal and of the same kind (``True`` is not ``1``, ``"1"`` is not ``1``)."""
    if isinstance(mine, bool) or isinstance(saved, bool):
        return isinstance(mine, bool) and isinstance(saved, bool) and saved == mine
    if isinstance(mine, int):
        return isinstance(saved, (int, np.integer)) and saved == mine
    return type(saved) is type(mine) and saved == mine


def from_dict(state: Any, identity: dict[str, Any], num_batches: Callable[[int], int]
              ) -> tuple[Position, dict[str, int]]:
    """Validate ``state`` against this loader and return its position and counters.

    Args:
        state: what ``Loader.state_dict()`` returned (after a JSON or pickle round trip).
        identity: this loader's identity fields (:data:`IDENTITY`).
        num_batches: batches of this rank in an epoch, for the position's bounds.

    Raises:
        StateError: naming the key: not a mapping, another version, a missing key, an
            identity field that differs (another dataset, seed, batch size, world size...),
            a counter or position that is not a plain integer in range (``"5"``, ``5.5``,
            ``True``, negative, beyond the epoch), duplicate or out-of-range
            ``extra_done`` entries. Never another exception type.
    """
    if not isinstance(state, Mapping):
        raise _fail(f"a loader state is a dict, got {type(state).__name__}", "state")
    version = state.get("version")
    if isinstance(version, bool) or version != VERSION:
        raise _fail(f"not a feedline loader state, or an unsupported version ({version!r}, "
                    f"this feedline reads version {VERSION})", "version")
    for name in IDENTITY:
        if name not in state:
            raise _fail(f"loader state has no {name!r}", name)
        if not _same(state[name], identity[name]):
            if name == "fingerprint":  # the one identity field a user does not pass to Loader
                raise _fail(f"state was saved over another dataset (fingerprint {state[name]!r}, this "
                            f"loader's dataset has {identity[name]!r}): re-packed into other shards, or "
                            "samples added, removed or changed", name,
                            fix="resume over the dataset the state was saved with; over a changed "
                                "dataset the saved position means other samples, so start the epoch "
                                "anew (set_epoch) instead of loading this state")
            raise _fail(f"state was saved with {name}={state[name]!r}, this loader has "
                        f"{name}={identity[name]!r}", name,
                        fix=f"build the loader with the same {name} as the run that saved it")
    epoch = _strict_int(state, "epoch", 0, MAX_EPOCH)
    total = num_batches(epoch)
    prefix = _strict_int(state, "batches_done", 0, total)
    extra_list = state.get("extra_done")
    if not isinstance(extra_list, (list, tuple)):
        raise _fail(f"loader state's extra_done must be a list of batch ids, got "
                    f"{extra_list!r}", "extra_done")
    if len(extra_list) > max(total - prefix - 1, 0):
        raise _fail(f"loader state's extra_done has {len(extra_list)} entries, at most "
                    f"{max(total - prefix - 1, 0)} batches can follow batches_done={prefix}",
                    "extra_done")
    extra: set[int] = set()
    for b in extra_list:
        if isinstance(b, bool) or not isinstance(b, (int, np.integer)):
            raise _fail(f"loader state's extra_done holds {b!r}, not a batch id", "extra_done")
        if not prefix < b < total:
            raise _fail(f"loader state's extra_done holds batch {b}, outside "
                        f"(batches_done={prefix}, {total})", "extra_done")
        if int(b) in extra:
            raise _fail(f"loader state's extra_done holds batch {b} twice", "extra_done")
        extra.add(int(b))
    saved_counters = state.get("counters", {})
    if not isinstance(saved_counters, Mapping):
        raise _fail(f"loader state's counters must be a dict, got {saved_counters!r}",
                    "counters")
    counters: dict[str, int] = {}
    for name in saved_counters:
        if name not in COUNTERS:
            raise _fail(f"loader state has an unknown counter {name!r}", "counters")
        counters[name] = _strict_int(saved_counters, name, 0, 2**63 - 1, f"counters.{name}")
    return Position(epoch=epoch, prefix=prefix, extra=extra), counters
