"""The loader's resumable position: small, JSON-serialisable, validated on load.

The position counts *delivered* batches only. Batches still in flight when
``state_dict()`` is called are not delivered, so a resumed loader produces
them again: nothing lost, nothing repeated. With ``in_order=False`` batches
arrive out of order, so the position is a prefix count plus the (few, bounded
by the prefetch window) batch ids delivered beyond it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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

    def remaining(self, num_batches: int) -> list[int]:
        """Batch ids of this epoch not delivered yet, in order."""
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


def from_dict(state: Any, identity: dict[str, Any]) -> tuple[Position, dict[str, int]]:
    """Validate ``state`` against this loader's identity and return its position.

    Raises:
        StateError: not a loader state, a different version, or an identity field
            (dataset fingerprint, seed, batch size, world size...) that differs;
            the error names the field.
    """
    if not isinstance(state, dict) or state.get("version") != VERSION:
        raise StateError(
            "not a feedline loader state (or an unsupported version)",
            field="version", fix="pass the dict returned by Loader.state_dict()",
        )
    for name in IDENTITY:
        if state.get(name) != identity[name]:
            raise StateError(
                f"state was saved with {name}={state.get(name)!r}, this loader has "
                f"{name}={identity[name]!r}",
                field=name, fix=f"build the loader with the same {name} as the run that saved it",
            )
    try:
        pos = Position(
            epoch=int(state["epoch"]),
            prefix=int(state["batches_done"]),
            extra={int(b) for b in state["extra_done"]},
        )
        counters = {str(k): int(v) for k, v in state.get("counters", {}).items()}
    except (KeyError, TypeError, ValueError) as exc:
        raise StateError(f"loader state is malformed: {exc}", field="position") from exc
    if pos.epoch < 0 or pos.prefix < 0 or any(b < pos.prefix for b in pos.extra):
        raise StateError("loader state has a negative or inconsistent position", field="position")
    return pos, counters
