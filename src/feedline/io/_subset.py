"""A packed dataset restricted to some of its samples: a train/validation split.

``torch.utils.data.random_split(open_dataset("data/"), [0.9, 0.1])`` gives
``Subset`` objects whose ``__getitem__`` returns the packed sample's raw field
bytes; a loader given one cannot see the packed dataset inside. :class:`PackedSubset`
is the same selection as a packed dataset of its own: batched reads through the
read planner, decoding by field extension, labels gathered from the index, keys and
shards in errors. ``PackedDataset.subset(indices)`` makes one, and
:func:`as_packed_subset` turns a (nested) ``Subset`` of a packed dataset into one,
which is what :class:`feedline.Loader` does with the ``Subset`` it is given.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from feedline.errors import ArgumentError, ConfigError, SampleIndexError

__all__ = ["PackedSubset", "all_columns", "all_labels", "as_packed_subset"]


def all_labels(dataset: Any, field: str) -> np.ndarray:
    """``int64[len(dataset)]``: every sample's label ``field``, one gather from the index."""
    schema = dataset.schema
    if getattr(schema.get(field), "kind", None) != "label":
        have = sorted(name for name, f in schema.items() if f.kind == "label")
        raise ConfigError(f"labels: field {field!r} is not an integer label in every sample here "
                          f"(label fields: {have or 'none'})", field=field,
                          fix="pack the column as the label (feedline pack --labels TABLE --label-column "
                              "COLUMN), or read other fields per sample with read_many")
    out = {field: np.empty(len(dataset), np.int64)}
    dataset.gather_labels(np.arange(len(dataset)), out)
    return out[field]


_COLUMN_CHUNK = 4096


def all_columns(dataset: Any, names: str | Sequence[str], field: str = "json") -> np.ndarray:
    """Every sample's value of column(s) ``names`` of the JSON ``field`` (the rest of a
    ``pack --labels TABLE`` row): ``(len,)`` for one name, ``(len, k)`` for k names.

    Reads only that field (a few bytes a sample, in chunks of 4,096 samples), never the
    images. Numbers come back as a numeric array (int64 when every value is an int,
    else float64), text as a numpy string array.

    Raises:
        ConfigError: no such field, a sample without the field or the column (the key and
            the columns it has are named), or a value that is a list or dict.
    """
    one = isinstance(names, str)
    cols: list[str] = [names] if isinstance(names, str) else list(names)
    if not cols or not all(isinstance(c, str) for c in cols):
        raise ArgumentError(f"column: names must be a column name or a list of them, got {names!r}",
                            field="names")
    if field not in dataset.fields:
        raise ConfigError(f"column: no field {field!r} in this dataset (fields: {dataset.fields})", field=field,
                          fix="pack the table with it: feedline pack SRC --labels TABLE (its other columns "
                              "go into 'json'); --label-column none keeps every column there")
    rows: list[list[Any]] = []
    for lo in range(0, len(dataset), _COLUMN_CHUNK):
        keys, views = dataset.read_fields(np.arange(lo, min(lo + _COLUMN_CHUNK, len(dataset))), [field])
        for key, view in zip(keys, views[field], strict=True):
            rows.append(_row_values(key, view, cols, field))
    values = np.asarray(rows) if rows else np.empty((0, len(cols)))
    if values.dtype.kind == "O":
        raise ConfigError(f"column: {cols} mix numbers and text across samples", field=field,
                          fix="read one kind of column at a time")
    return values[:, 0] if one else values


def _row_values(key: str, view: Any, cols: list[str], field: str) -> list[Any]:
    if view is None:
        raise ConfigError(f"column: sample {key!r} has no {field!r} field", field=field)
    row = json.loads(bytes(view))
    if not isinstance(row, dict):
        raise ConfigError(f"column: {field!r} of sample {key!r} is not a JSON object", field=field)
    missing = [c for c in cols if c not in row]
    if missing:
        raise ConfigError(f"column: sample {key!r} has no column {missing[0]!r} in {field!r} "
                          f"(its columns: {sorted(row)})", field=field)
    out = [row[c] for c in cols]
    if any(isinstance(v, (list, dict)) for v in out):
        raise ConfigError(f"column: a value of {cols} in sample {key!r} is a list or dict, not one value",
                          field=field)
    return out


class PackedSubset:
    """Samples ``indices`` of a packed dataset, renumbered ``0 .. len(indices) - 1``.

    Reads, keys, fields and schema are the base dataset's; sample ``i`` here is sample
    ``indices[i]`` there (an index may repeat). Picklable as its base is (process
    workers reopen the base). Closing it closes the base.

    Raises:
        ArgumentError: ``indices`` is not a flat sequence of ints.
        SampleIndexError: an index is out of the base dataset's range.
    """

    def __init__(self, base: Any, indices: Sequence[int] | np.ndarray) -> None:
        self._base = base
        self._idx = _checked(indices, len(base), "dataset")
        self._idx.setflags(write=False)

    @property
    def base(self) -> Any:
        """The packed dataset this selects from."""
        return self._base

    @property
    def indices(self) -> np.ndarray:
        """Sample ``i`` here is sample ``indices[i]`` of :attr:`base` (read-only int64)."""
        return self._idx

    def _map(self, indices: Any) -> np.ndarray:
        return self._idx[_checked(indices, len(self._idx), "subset")]

    def __len__(self) -> int:
        return len(self._idx)

    def __getitem__(self, i: int) -> dict[str, Any]:
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise ArgumentError(f"dataset index must be an int, got {type(i).__name__}", field="index")
        return self._base.read_many(self._map([int(i)]))[0]

    def locate(self, i: int) -> tuple[str, str]:
        """``(shard name, sample key)`` of sample ``i`` of the subset."""
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise ArgumentError(f"sample index must be an int, got {type(i).__name__}", field="index")
        return self._base.locate(int(self._map([int(i)])[0]))

    def read_many(self, indices: Sequence[int] | np.ndarray) -> list[dict[str, Any]]:
        """``base.read_many`` of the mapped indices."""
        return self._base.read_many(self._map(indices))

    def read_fields_into(self, indices: Sequence[int] | np.ndarray,
                         out: Mapping[str, np.ndarray]) -> list[str]:
        """``base.read_fields_into`` of the mapped indices."""
        return self._base.read_fields_into(self._map(indices), out)

    def read_fields(self, indices: Sequence[int] | np.ndarray,
                    fields: Sequence[str]) -> tuple[list[str], dict[str, list[Any]]]:
        """``base.read_fields`` of the mapped indices."""
        return self._base.read_fields(self._map(indices), fields)

    def gather_labels(self, indices: Sequence[int] | np.ndarray, out: Mapping[str, np.ndarray]) -> None:
        """``base.gather_labels`` of the mapped indices."""
        self._base.gather_labels(self._map(indices), out)

    def gather_columns(self, indices: Sequence[int] | np.ndarray, out: Mapping[str, np.ndarray]) -> None:
        """``base.gather_columns`` of the mapped indices."""
        self._base.gather_columns(self._map(indices), out)

    def labels(self, field: str = "cls") -> np.ndarray:
        """Each sample's value of label field ``field`` (see ``PackedDataset.labels``)."""
        return all_labels(self, field)

    def read_ranges(self, i: int, field: str, ranges: Sequence[tuple[int, int]]) -> np.ndarray:
        """Parts of one member of sample ``i`` (see ``PackedDataset.read_ranges``)."""
        return self._base.read_ranges(int(self._map([int(i)])[0]), field, ranges)

    def column(self, names: str | Sequence[str], field: str = "json") -> np.ndarray:
        """Each sample's value of table column(s) ``names`` (see ``PackedDataset.column``)."""
        return all_columns(self, names, field)

    def sizes(self, field: str) -> np.ndarray:
        """Each sample's stored bytes of ``field`` (see ``PackedDataset.sizes``)."""
        return self._base.sizes(field)[self._idx]

    def keys(self) -> list[str]:
        """The subset's sample keys, in its order."""
        keys = self._base.keys()
        return [keys[i] for i in self._idx]

    @property
    def fields(self) -> list[str]:
        """The base dataset's field names."""
        return self._base.fields

    @property
    def classes(self) -> tuple[str, ...] | None:
        """The base dataset's class names (a split keeps every class's number)."""
        return self._base.classes

    @property
    def class_to_idx(self) -> dict[str, int]:
        return dict(self._base.class_to_idx)

    @property
    def schema(self) -> Any:
        """The base dataset's schema (a field varying anywhere in it is ``var`` here too)."""
        return self._base.schema

    @property
    def backend(self) -> Any:
        return self._base.backend

    @property
    def root(self) -> str:
        return str(self._base.root)

    @property
    def fingerprint(self) -> str:
        """The base's fingerprint and the selection's: a loader state saved on one split
        does not load on another."""
        h = hashlib.sha256(np.ascontiguousarray(self._idx).tobytes()).hexdigest()[:16]
        return f"{self._base.fingerprint}:subset-{len(self._idx)}-{h}"

    def release_buffers(self) -> int:
        return int(self._base.release_buffers())

    def close(self) -> None:
        self._base.close()

    def __repr__(self) -> str:
        return f"PackedSubset({self._base!r}, {len(self._idx)} of {len(self._base)} samples)"


def _checked(indices: Any, n: int, of: str) -> np.ndarray:
    """``indices`` as int64 in ``[0, n)`` (negative ones counted from the end).

    Raises:
        ArgumentError: not a flat sequence of ints.
        SampleIndexError: an index out of range for ``n`` samples (of a ``of``).
    """
    try:
        idx = np.asarray(list(indices) if not isinstance(indices, np.ndarray) else indices)
    except (TypeError, ValueError, OverflowError) as e:
        raise ArgumentError(f"indices must be a flat sequence of ints: {e}", field="indices") from None
    if idx.size and (idx.ndim != 1 or not np.issubdtype(idx.dtype, np.integer)):
        raise ArgumentError(f"indices must be a flat sequence of ints, got dtype {idx.dtype} "
                            f"and shape {idx.shape}", field="indices")
    idx = idx.astype(np.int64).reshape(-1)
    bad = (idx < -n) | (idx >= n)
    if bad.any():
        raise SampleIndexError(f"sample index {int(idx[bad][0])} out of range for a {of} of {n} samples")
    return np.where(idx < 0, idx + n, idx)


def _is_subset(dataset: Any) -> bool:
    """A ``torch.utils.data.Subset`` (checked by name, without importing torch)."""
    return (any(c.__name__ == "Subset" for c in type(dataset).__mro__)
            and hasattr(dataset, "dataset") and hasattr(dataset, "indices"))


def as_packed_subset(dataset: Any) -> Any:
    """A ``Subset`` (or a ``Subset`` of a ``Subset``...) of a packed dataset as a
    :class:`PackedSubset`; anything else as it is. A ``Subset`` subclass that overrides
    ``__getitem__`` (or ``__getitems__``) is left alone: its samples are its own."""
    chain = []
    inner = dataset
    while _is_subset(inner) and not _overrides_getitem(inner):
        chain.append(inner.indices)
        inner = inner.dataset
    if not chain or not (callable(getattr(inner, "read_many", None))
                         and callable(getattr(inner, "locate", None))):
        return dataset
    base, idx = (inner.base, inner.indices) if isinstance(inner, PackedSubset) else (
        inner, np.arange(len(inner), dtype=np.int64))
    for indices in reversed(chain):  # the innermost Subset selects first
        try:
            idx = idx[np.asarray(indices, dtype=np.int64)]
        except (IndexError, ValueError, TypeError) as e:
            raise SampleIndexError(f"a Subset's indices do not fit the {len(idx)} samples "
                                   f"it selects from: {e}") from None
    return PackedSubset(base, idx)


def _overrides_getitem(subset: Any) -> bool:
    """True when a class below ``Subset`` defines ``__getitem__`` or ``__getitems__``."""
    for c in type(subset).__mro__:
        if c.__name__ == "Subset" and c.__module__.startswith("torch."):
            return False
        if "__getitem__" in vars(c) or "__getitems__" in vars(c):
            return True
    return False
