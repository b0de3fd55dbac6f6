"""Default collate: infer a fixed batch layout once, then fill slots in place.

The layout is inferred once, from batch 0 of the epoch's plan (never from
whichever batch a worker finishes first, so it is the same on every run for a
seed): every leaf of the sample tree (dicts and tuples are walked; packed
samples only at the top level, except a dict or tuple whose values are all
arrays, as an ``.npz`` or what ``torch.save`` wrote decodes, which is walked
too: ``batch["npz"]["image"]`` is one stacked tensor, as torch's
``default_collate`` gives it, while a ``.json`` dict stays one per sample)
whose values are numbers or arrays, and whose
most common shape and dtype is held by more than half of that batch, becomes
a *dense* leaf, stacked into a preallocated slot array of shape
``(batch_size, *shape)``; every other leaf (strings, bytes, lists, arrays of
varying shape, numpy arrays of strings or records) is *ragged* and delivered as a list.

A later batch in which some sample's dense leaf has another shape or dtype
(a portrait photo among landscape ones) does not fail: that leaf falls back
to a list for that batch only (:func:`fill` reports it).

Fields that only some samples have (an optional mask, a dataset mixing
``jpg`` and ``png``) are fields too: a dict sample's top-level fields are the
union over batch 0 and the ``fields`` the dataset declares (every field of a
packed dataset read without a transform). A sample lacking one gives ``None``
in its place, so that field is a list for the batch. A sample with a field the
layout does not know, or with another nesting, is a bad sample (``on_error``
decides).
This module uses numpy only, so process workers can fill shared-memory slots
without torch.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from operator import itemgetter
from typing import Any

import numpy as np

from feedline.errors import DecodeError

Path = tuple[Any, ...]


@dataclass(frozen=True)
class Ref:
    """A leaf's place in a layout skeleton."""

    path: Path


@dataclass(frozen=True)
class Leaf:
    path: Path
    shape: tuple[int, ...] | None
    """Per-sample shape of a dense leaf; ``None`` for a ragged one."""
    dtype: str | None


@dataclass(frozen=True)
class Layout:
    """The batch structure and the slot arrays it needs."""

    skeleton: Any
    """The sample structure with each leaf replaced by its path."""
    leaves: tuple[Leaf, ...]
    batch_size: int
    max_depth: int
    varied: tuple[tuple[Path, tuple[tuple[int, ...], ...]], ...] = ()
    """Ragged leaves whose batch-0 values are all numeric arrays, of these (most common)
    shapes: audio clips or images of varying size, delivered as lists (the loader warns)."""

    @property
    def dense(self) -> tuple[Leaf, ...]:
        return tuple(leaf for leaf in self.leaves if leaf.shape is not None)

    def leaf_bytes(self, leaf: Leaf) -> int:
        assert leaf.shape is not None and leaf.dtype is not None
        count = int(np.prod((self.batch_size, *leaf.shape), dtype=np.int64))
        return count * np.dtype(leaf.dtype).itemsize

    @cached_property
    def names(self) -> tuple[Any, ...]:
        """The top-level field of each leaf, in layout order."""
        return tuple(leaf.path[0] if leaf.path else None for leaf in self.leaves)

    @cached_property
    def allowed(self) -> frozenset[Any]:
        """The top-level keys a flat sample may hold: its fields and ``__key__``."""
        return frozenset((*self.names, "__key__"))

    @cached_property
    def flat(self) -> bool:
        """True for a flat dict of fields (packed samples): the fast path (computed once:
        every sample of every batch asks)."""
        return isinstance(self.skeleton, dict) and all(len(leaf.path) == 1 for leaf in self.leaves)

    @cached_property
    def flat_tuple(self) -> bool:
        """True for a flat tuple of leaves (``TensorDataset``'s ``(x, y)``): the tuple fast path."""
        return isinstance(self.skeleton, tuple) and len(self.skeleton) == len(self.leaves) \
            and all(leaf.path == (i,) for i, leaf in enumerate(self.leaves))

    @property
    def nbytes(self) -> int:
        """Bytes of one slot (all dense leaves at full batch size)."""
        return sum(self.leaf_bytes(leaf) for leaf in self.dense)


def flatten(sample: Any, max_depth: int, path: Path = ()) -> tuple[Any, list[tuple[Path, Any]]]:
    """(skeleton, [(path, leaf)]) of a sample; ``__dunder__`` dict keys are dropped. Below
    ``max_depth`` only a dict or tuple of arrays (:func:`_array_tree`) is walked."""
    if isinstance(sample, Mapping) and (len(path) < max_depth or _array_tree(sample)):
        skeleton: dict[Any, Any] = {}
        leaves: list[tuple[Path, Any]] = []
        for k, v in sample.items():
            if isinstance(k, str) and k.startswith("__"):
                continue
            skeleton[k], sub = flatten(v, max_depth, (*path, k))
            leaves.extend(sub)
        return skeleton, leaves
    if _plain_tuple(sample) and (len(path) < max_depth or _array_tree(sample)):
        parts = [flatten(v, max_depth, (*path, i)) for i, v in enumerate(sample)]
        return tuple(p[0] for p in parts), [leaf for p in parts for leaf in p[1]]
    return Ref(path), [(path, sample)]


def _plain_tuple(value: Any) -> bool:
    """A tuple walked as structure (not a namedtuple, which stays one value)."""
    return isinstance(value, tuple) and not hasattr(value, "_fields")


def _array_tree(value: Mapping[Any, Any] | tuple[Any, ...]) -> bool:
    """Whether a dict or (plain) tuple holds arrays (numpy, or torch's, which has
    ``__array__`` and ``shape``), such dicts or tuples, and strings, at least one of them
    not a string: what ``.npz`` and ``.pt`` fields decode to (``{"image": t, "label": 3,
    "name": "cat"}``: the string members a list, as ``default_collate`` gives them). A JSON
    value never is one (its numbers are Python's)."""
    values = list(value.values() if isinstance(value, Mapping) else value)
    arrays = [((isinstance(v, Mapping) or _plain_tuple(v)) and _array_tree(v))
              or isinstance(v, np.ndarray) or (hasattr(v, "__array__") and hasattr(v, "shape"))
              for v in values]
    return any(arrays) and all(a or isinstance(v, str) for a, v in zip(arrays, values, strict=True))


def unflatten(skeleton: Any, values: Mapping[Path, Any]) -> Any:
    """Rebuild the structure of ``skeleton`` with ``values[path]`` at each leaf."""
    if isinstance(skeleton, Ref):
        return values[skeleton.path]
    if isinstance(skeleton, dict):
        return {k: unflatten(v, values) for k, v in skeleton.items()}
    return tuple(unflatten(v, values) for v in skeleton)


def _as_dense(value: Any) -> np.ndarray | None:
    if isinstance(value, (bool, int, float, np.number)):
        return np.asarray(value)
    if isinstance(value, np.ndarray) or (hasattr(value, "__array__") and hasattr(value, "shape")):
        try:
            arr = np.asarray(value)
        except (TypeError, RuntimeError):  # a tensor numpy cannot hold (bfloat16): a list
            return None
        # only what a tensor holds is stacked: strings (np.array("cat") in an .npz), records
        # and dates stay arrays in a list (before: torch refused the slot, a TypeError)
        return arr if arr.dtype.kind in "biufc" else None
    return None


def _union(flat: Sequence[tuple[Any, list[tuple[Path, Any]]]], fields: Sequence[Any]) -> Any:
    """The skeleton of batch 0: sample 0's, or, when every sample is a dict, the union of
    their top-level fields (first-seen order) and then ``fields`` not seen."""
    if not all(isinstance(sk, dict) for sk, _ in flat):
        return flat[0][0]
    union: dict[Any, Any] = {}
    for sk, _ in flat:
        _merge(union, sk)
    for name in fields:
        if not (isinstance(name, str) and name.startswith("__")):
            union.setdefault(name, Ref((name,)))
    return union


def _merge(into: dict[Any, Any], skeleton: dict[Any, Any]) -> None:
    """Add ``skeleton``'s keys to ``into``, first-seen order, nested dicts merged alike (an
    ``.npz`` or a transform's dict whose members vary between samples)."""
    for k, v in skeleton.items():
        if not isinstance(v, dict):
            into.setdefault(k, v)
        elif isinstance(sub := into.setdefault(k, {}), dict):  # a fresh dict: no sample's is shared
            _merge(sub, v)


def _fits(want: Any, got: Any) -> bool:
    """Whether a sample's skeleton ``got`` fits the layout's ``want``: equal, or, for dicts
    at any depth, each key known with a fitting value (a member the sample lacks is a
    ``None`` in that leaf's list, as for a missing top-level field)."""
    if isinstance(got, dict) and isinstance(want, dict):
        return all(k in want and _fits(want[k], v) for k, v in got.items())
    return bool(want == got)


def _paths(skeleton: Any) -> list[Path]:
    """The leaf paths of a skeleton, in order."""
    if isinstance(skeleton, Ref):
        return [skeleton.path]
    parts = skeleton.values() if isinstance(skeleton, dict) else skeleton
    return [p for part in parts for p in _paths(part)]


def infer_layout(samples: Sequence[Any], batch_size: int, max_depth: int,
                 fields: Sequence[Any] = ()) -> Layout:
    """The layout of batch 0 of decoded/transformed samples (see the module docstring:
    a leaf is dense when more than half of the batch has one shape and dtype for it).

    Args:
        fields: top-level fields the dataset may hold beyond those of batch 0 (dict
            samples only): they join the layout, ragged unless batch 0 has them.

    Raises:
        ValueError: ``samples`` is empty.
    """
    if not samples:
        raise ValueError("cannot infer a batch layout from zero samples")
    flat = [flatten(s, max_depth) for s in samples]
    skeleton = _union(flat, fields)
    values = [dict(leaves) for _, leaves in flat]
    leaves = []
    varied = []
    for path in _paths(skeleton):
        kinds: Counter[tuple[tuple[int, ...], str]] = Counter()
        present = 0
        for v in values:
            value = v.get(path)
            present += value is not None
            arr = _as_dense(value)
            if arr is not None:
                kinds[(tuple(arr.shape), arr.dtype.str)] += 1
        common = kinds.most_common(1)  # ties: the kind met first (Counter keeps order)
        if common and 2 * common[0][1] > len(samples):
            leaves.append(Leaf(path, *common[0][0]))
            continue
        leaves.append(Leaf(path, None, None))
        shapes = list(dict.fromkeys(shape for (shape, _), _ in kinds.most_common()))
        if len(shapes) > 1 and sum(kinds.values()) == present and all(shapes):
            varied.append((path, tuple(shapes[:3])))
    return Layout(skeleton, tuple(leaves), batch_size, max_depth, tuple(varied))


def _leaves(layout: Layout, sample: Any) -> list[Any]:
    """The sample's leaf values in layout order (structure checked; ``None`` for each
    leaf under a field or dict member the sample lacks)."""
    if layout.flat and isinstance(sample, Mapping) and sample.keys() <= layout.allowed:
        return [sample.get(name) for name in layout.names]  # one set test: every sample asks
    if layout.flat_tuple and type(sample) is tuple and len(sample) == len(layout.leaves) \
            and all(hasattr(v, "shape") or not isinstance(v, (tuple, Mapping)) for v in sample):
        return list(sample)  # (x, y) of a TensorDataset: no walk (before: flatten per sample)
    skeleton, leaves = flatten(sample, layout.max_depth)
    want = layout.skeleton
    # by path, not position: dict equality ignores key order, and samples built by
    # different code paths list their keys in different orders
    if _fits(want, skeleton):
        got = dict(leaves)
        return [got.get(leaf.path) for leaf in layout.leaves]
    raise DecodeError(
        f"sample structure differs from the first batch{_field_difference(want, skeleton)}",
        stage="collate", fix="give every sample every field, with None where it has no value "
        "(a field None in some samples is a list with None there); a dataset that mixes image "
        "formats maps them to one field in transform=, e.g. "
        "feedline.vision.ImageTransform(('jpg', 'png')); or pass collate=",
    )


def _field_difference(want: Any, got: Any) -> str:
    """``": it has 'png', ..."`` naming the fields (or, in a dict field such as an ``.npz``,
    the members: ``'npz/obj_5'``) that ``got`` has and ``want`` lacks, with the fix for a
    dict field whose members vary ('' when none: a field the sample lacks is no error)."""
    extra = _extra(want, got, ())
    if not extra:
        return ""
    names = ", ".join(repr("/".join(map(str, p))) for p in extra[:5])
    if all(len(p) == 1 for p in extra):
        return f": it has {names}, which batch 0 (and the dataset's fields) lack"
    return (f": it has {names}, which no sample of batch 0 has (a field whose members vary "
            f"from sample to sample, such as an .npz of a variable list of arrays, is laid out by "
            f"batch 0's members: pass a collate= that keeps it as a list per sample, or store "
            f"the list as one array and its lengths)")


def _extra(want: Any, got: Any, path: Path) -> list[Path]:
    """The paths of dict keys in ``got`` that ``want`` lacks (nested dicts walked)."""
    if not isinstance(want, dict) or not isinstance(got, dict):
        return []
    out = [(*path, k) for k in got if k not in want]
    for k, v in got.items():
        if k in want:
            out += _extra(want[k], v, (*path, k))
    return out


def all_flat(layout: Layout, samples: Sequence[Any]) -> bool:
    """Whether every sample is a plain dict holding only the fields of a flat layout: each
    passes :func:`check` (which a False answer leaves to decide, sample by sample)."""
    if not layout.flat:
        return False
    allowed = layout.allowed
    return all(type(s) is dict and s.keys() <= allowed for s in samples)


def check(layout: Layout, sample: Any) -> None:
    """Check the structure of one sample against the layout (no unknown field, same nesting).

    A dense leaf of another shape or dtype, or a field or dict member the sample lacks, is
    *not* an error: :func:`fill` delivers that leaf as a list for the batch.

    Raises:
        DecodeError: the sample's structure differs from the layout.
    """
    if type(sample) is dict and layout.flat and sample.keys() <= layout.allowed:
        return  # the common case, without building its leaves (a 4-number record: 1.3 us of 4)
    _leaves(layout, sample)


def fits(spec: Leaf, value: Any) -> bool:
    """Whether ``value`` can be stacked into the rows of dense leaf ``spec``."""
    if isinstance(value, np.ndarray):
        return value.shape == spec.shape and value.dtype.str == spec.dtype
    arr = _as_dense(value)
    return arr is not None and arr.shape == spec.shape and arr.dtype.str == spec.dtype


def as_list(column: Sequence[Any]) -> list[Any]:
    """A ragged column: numpy views are copied so they outlive read buffers and slots."""
    return [np.array(v, copy=True) if isinstance(v, np.ndarray) else v for v in column]


def fill(layout: Layout, arrays: Mapping[Path, np.ndarray], samples: Sequence[Any],
         into: Collection[Path] | None = None) -> dict[Path, list[Any]]:
    """Write dense leaves of ``samples`` into the first rows of ``arrays`` (the slot).

    One ``numpy.stack(..., out=)`` per dense leaf; values that already are their
    destination row (decoded straight into the slot: only leaves in ``into`` may be,
    ``None``: any) are not copied. Returns the ragged
    leaves as lists (numpy views are copied so they survive the read buffer), and with
    them every dense leaf that some sample of this batch holds at another shape or dtype
    (its list replaces the slot rows for this batch). Samples must have passed
    :func:`check`.
    """
    ragged: dict[Path, list[Any]] = {}
    n = len(samples)
    for spec, column in zip(layout.leaves, _columns(layout, samples), strict=True):
        stacked = _stack_tensors(spec, arrays[spec.path][:n], column) if spec.shape is not None else None
        if stacked is not None:
            if not stacked:
                ragged[spec.path] = as_list(column)
        elif spec.shape == () and _fill_scalars(spec, arrays[spec.path][:n], column):
            continue
        elif spec.shape is None or not all(fits(spec, v) for v in column):
            ragged[spec.path] = as_list(column)
        elif spec.shape == ():
            arrays[spec.path][:n] = column
        else:
            _fill_dense(arrays[spec.path], column, into is None or spec.path in into)
    return ragged


def _columns(layout: Layout, samples: Sequence[Any]) -> list[list[Any]]:
    """Each leaf's values across ``samples``, which passed :func:`check`: a flat dict's
    fields or a flat tuple's members taken as they are (before: every sample walked again,
    1.5 ms a batch of 256 dicts), else by :func:`_leaves`."""
    if not samples:
        return [[] for _ in layout.leaves]
    if layout.flat and all(type(s) is dict or isinstance(s, Mapping) for s in samples):
        if len(layout.names) > 1:
            try:  # one C call a sample, then a transpose: 4 fields of 1024 samples in 0.2 ms, not 1.2
                return [list(c) for c in zip(*map(itemgetter(*layout.names), samples), strict=True)]
            except KeyError:  # a sample lacks a field: None in its place
                pass
        return [[s.get(name) for s in samples] for name in layout.names]
    if layout.flat_tuple and all(type(s) is tuple for s in samples):
        return [list(c) for c in zip(*samples, strict=True)]
    return [list(c) for c in zip(*(_leaves(layout, s) for s in samples), strict=True)]


_SCALARS = {int: np.dtype(np.int64).str, float: np.dtype(np.float64).str, bool: np.dtype(np.bool_).str}


def _fill_scalars(spec: Leaf, dst: np.ndarray, column: Sequence[Any]) -> bool:
    """A column of Python numbers of one type (``int`` labels) assigned at once to a
    scalar leaf of the dtype numpy gives that type: True; False for any other column (then
    checked value by value: 1 us each for an ``int``). An ``int`` beyond int64 is False."""
    kinds = {type(v) for v in column}
    if len(kinds) != 1 or _SCALARS.get(next(iter(kinds))) != spec.dtype:
        return False
    try:
        dst[:] = column
    except OverflowError:  # the values check finds it ragged, as before
        return False
    return True


def _stack_tensors(spec: Leaf, dst: np.ndarray, column: Sequence[Any]) -> bool | None:
    """A column of CPU torch tensors (a ``TensorDataset``'s rows), checked and stacked by
    torch into ``dst``: ``True``; ``False`` when one has another shape or dtype (the column
    is ragged for this batch); ``None`` for any other column. Before: two numpy conversions
    per value (``__array__``: 12 us each), 20 ms a batch of 256 ``(x, y)`` against
    ``default_collate``'s 0.2 ms. Torch is imported already when a sample holds a tensor."""
    torch = sys.modules.get("torch")
    tensor = getattr(torch, "Tensor", None)
    if tensor is None or not column or not all(type(v) is tensor for v in column):
        return None
    if not all(v.device.type == "cpu" and not v.requires_grad for v in column):
        return None  # the numpy path copies them as before (or finds them ragged)
    try:
        want = torch.from_numpy(dst)  # type: ignore[union-attr]
    except (TypeError, ValueError):  # a slot dtype torch has no view for (big-endian)
        return None
    if not all(v.shape == spec.shape and v.dtype == want.dtype for v in column):
        return False
    torch.stack(column, out=want)  # type: ignore[union-attr]
    return True


def _in_place(rows: list[int], dst: np.ndarray, column: Sequence[Any]) -> list[bool]:
    """Per value: is it exactly row ``i`` of ``dst`` (same address, shape and strides)?"""
    row_shape, row_strides = dst.shape[1:], dst.strides[1:]
    return [isinstance(v, np.ndarray) and v.__array_interface__["data"][0] == row
            and v.shape == row_shape and v.strides == row_strides
            for row, v in zip(rows, column, strict=False)]


def _fill_dense(dst: np.ndarray, column: Sequence[Any], placed_rows: bool = True) -> None:
    """Stack ``column`` into the first rows of ``dst``; ``placed_rows``: some values may be
    their row already (decoded in place), and are left where they are."""
    n = len(column)
    if not placed_rows:
        np.stack(column, out=dst[:n])
        return
    base, step = dst.__array_interface__["data"][0], dst.strides[0]
    placed = _in_place([base + i * step for i in range(n)], dst, column)
    if not any(placed):
        np.stack(column, out=dst[:n])
        return
    # rows decoded in place; the others move forward (a value sits at or after its row,
    # so filling rows in increasing order never overwrites a value not yet copied)
    for i, (v, ok) in enumerate(zip(column, placed, strict=True)):
        if not ok:
            dst[i] = v
