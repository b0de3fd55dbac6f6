"""The per-sample stages of a batch: values with one small interface.

A :class:`Stage` has a ``name`` (the span and error stage name) and is called
with one sample and its :class:`Place`; it returns the sample for the next
stage. A stage that raises makes that sample a bad sample, named by the
stage (``on_error`` decides: raise a placed ``WorkerError`` or skip and
refill). The runner (:func:`feedline.pipeline.jobs.prepare`) applies the
stages in order, one span per stage and batch; it knows nothing about what
they do, so a new stage (a filter, a decode of another kind) is a new value in
``Context.stages`` written in its own module.

Stages run in the workers (thread or process), so they must be picklable for
process workers; this module does not import torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import numpy as np

from feedline.decode import Decoders
from feedline.errors import DecodeError
from feedline.pipeline import collate
from feedline.pipeline.source import Item


class Place(NamedTuple):
    """Where a sample is: its item (index, key, shard), its row in the batch slot, and the
    slot arrays a stage may write that row into (``into``: field -> array; may be empty).
    A tuple: one is made per sample (a frozen dataclass cost 1 us each)."""

    item: Item
    row: int
    into: Mapping[str, np.ndarray]


class Stage(Protocol):
    """One step applied to every sample of a batch in a worker."""

    @property
    def name(self) -> str: ...

    def __call__(self, sample: Any, place: Place) -> Any: ...


class Accepting(Protocol):
    """A stage that may also say at once that a whole batch passes it unchanged
    (``accepts(samples) -> True``); the runner then makes no per-sample call. False: the
    samples go through ``__call__`` one by one, as for any stage."""

    def accepts(self, samples: list[Any]) -> bool: ...


@dataclass(frozen=True)
class Decode:
    """Packed bytes -> arrays by field codec; fields in ``place.into`` decode into their row
    (a value that does not fit its row gets a fresh array instead)."""

    decoders: Decoders
    name: str = "decode"

    def __call__(self, sample: Any, place: Place) -> Any:
        into = {f: a[place.row] for f, a in place.into.items()} if place.into else None
        return self.decoders.decode_sample(sample, key=place.item.key, into=into)


@dataclass(frozen=True)
class Transform:
    """The user's ``transform=``: ``fn(sample) -> sample``."""

    fn: Callable[[Any], Any]
    name: str = "transform"

    def __call__(self, sample: Any, place: Place) -> Any:
        out = self.fn(sample)
        if out is None:
            raise DecodeError("transform returned None", key=place.item.key, stage="transform",
                              fix="return the (changed) sample from transform=")
        return out


@dataclass(frozen=True)
class Check:
    """The sample's structure against the batch layout (same fields, same nesting)."""

    layout: collate.Layout
    name: str = "collate"

    def __call__(self, sample: Any, place: Place) -> Any:
        collate.check(self.layout, sample)
        return sample

    def accepts(self, samples: list[Any]) -> bool:
        """True when every sample passes unchanged (flat dicts of the layout's fields): the
        runner then skips the per-sample calls (2 us a sample of a 4-number record)."""
        return collate.all_flat(self.layout, samples)


@dataclass(frozen=True)
class DropFields:
    """Drop fields of packed samples before decoding (the plan gathers them instead)."""

    names: frozenset[str]
    name: str = "decode"

    def __call__(self, sample: Any, place: Place) -> Any:
        return {k: v for k, v in sample.items() if k not in self.names}
