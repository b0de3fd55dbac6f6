"""Targets from a table row: a Kaggle-style ``train.csv`` packed beside its images.

``feedline pack images/ --out data/train --labels train.csv --label-column none`` keeps
every column of each file's row in the sample's ``json`` field. At load time:

- ``ds.column("fold")`` (:meth:`feedline.io.PackedDataset.column`) gives a column for
  every sample without reading an image: select a cross-validation fold with
  ``ds.subset(np.flatnonzero(fold != k))``, no re-packing per fold;
- :class:`Columns` is a ``transform=`` that turns some columns of the row into one
  array field per sample (multi-label 0/1 targets, float targets), so they batch as
  one ``float32[N, k]`` tensor, in the workers;
- :func:`chain` runs transforms one after the other (``torchvision``'s ``Compose``).

Example::

    tf = table.chain(vision.ImageTransform(("jpg", "png"), size=224, out="image"),
                     table.Columns(["label_a", "label_b", "label_c"], out="y"))
    loader = feedline.Loader(ds.subset(train_idx), batch_size=32, transform=tf)
    # batch: {"image": float32[32, 3, 224, 224], "y": float32[32, 3], "__key__": [...]}
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from feedline.errors import ArgumentError, ConfigError

__all__ = ["Columns", "chain"]


class Columns:
    """A transform: columns ``columns`` of the sample's table row (field ``field``, a dict
    or JSON bytes) as one array ``out`` of ``dtype``, shape ``(len(columns),)``.

    Args:
        columns: the column names, in the order of the array.
        out: the field the array goes into (``"y"``).
        dtype: numpy dtype of the array (``float32``: what ``BCEWithLogitsLoss`` and
            ``MSELoss`` take; ``int64`` for class ids).
        field: the field holding the row (``json`` for ``pack --labels``).
        keep: keep ``field`` in the sample; by default it is removed, so batches carry no
            list of dicts.

    Raises (when called):
        ConfigError: a sample without ``field`` or one of the columns (key and columns
            named), or a value that is not a number.
    """

    def __init__(self, columns: Sequence[str], out: str = "y", dtype: Any = np.float32,
                 field: str = "json", keep: bool = False) -> None:
        if isinstance(columns, str) or not columns or not all(isinstance(c, str) for c in columns):
            raise ArgumentError(f"Columns: columns must be a list of column names, got {columns!r}",
                                field="columns")
        self.columns = tuple(columns)
        self.out = out
        self.dtype = np.dtype(dtype)
        self.field = field
        self.keep = bool(keep)

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        row = sample.get(self.field)
        key = sample.get("__key__")
        if row is None:
            raise ConfigError(f"Columns: sample {key!r} has no {self.field!r} field (fields: "
                              f"{sorted(k for k in sample if not k.startswith('__'))})", field=self.field,
                              fix="pack the table with the images: feedline pack SRC --labels TABLE "
                                  "--label-column none")
        if not isinstance(row, dict):
            row = json.loads(bytes(row))
        missing = [c for c in self.columns if c not in row]
        if missing:
            raise ConfigError(f"Columns: sample {key!r} has no column {missing[0]!r} (its columns: "
                              f"{sorted(row)})", field=self.field)
        try:
            value = np.array([row[c] for c in self.columns], dtype=self.dtype)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"Columns: sample {key!r}: {self.columns} are not all numbers ({e})",
                              field=self.field) from None
        out = dict(sample)
        if not self.keep:
            del out[self.field]
        out[self.out] = value
        return out

    def __repr__(self) -> str:
        return f"Columns({list(self.columns)!r}, out={self.out!r}, dtype={self.dtype.name})"


def chain(*transforms: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """One transform that runs ``transforms`` in order, each on what the one before
    returned (``torchvision.transforms.Compose``). Picklable when each one is, so it runs
    in process workers too.

    Raises:
        ArgumentError: no transform, or one that is not callable.
    """
    if not transforms or not all(callable(t) for t in transforms):
        raise ArgumentError(f"chain: give one or more callables, got {transforms!r}", field="transforms")
    return _Chain(transforms)


class _Chain:
    def __init__(self, transforms: tuple[Callable[[Any], Any], ...]) -> None:
        self.transforms = transforms

    def __call__(self, sample: Any) -> Any:
        for t in self.transforms:
            sample = t(sample)
        return sample

    def __repr__(self) -> str:
        return f"chain({', '.join(map(repr, self.transforms))})"
