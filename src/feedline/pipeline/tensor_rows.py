"""In-memory tensor datasets, read a batch at a time (the ``take-rows`` recipe).

A ``torch.utils.data.TensorDataset`` (or a ``Subset`` of one, as ``random_split``
gives) already holds every sample as a row of a few tensors. Fetching it per sample
(``ds[i]``: one tuple of tensor views per sample, then a stack) costs about 4 us a
sample in Python; :func:`take` gathers a batch's rows of each tensor with one
``torch.index_select`` straight into the slot, as DataLoader's ``default_collate``
never can (it stacks what ``__getitem__`` returned).

Which datasets qualify is decided once, by :func:`columns` (the plan keeps only the
answer, never the tensors, so nothing is pickled twice to process workers; the source
keeps the tensors it found, see :meth:`feedline.pipeline.source.Source.take_rows`). A
batch ``take`` refuses (an index out of range) is redone on the per-sample path, which
names the failing index.

Torch is not imported here: a dataset of tensors has imported it already.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def columns(dataset: Any) -> tuple[tuple[Any, ...], Any] | None:
    """``(tensors, table)`` of a ``TensorDataset`` whose ``__getitem__`` is torch's (through
    any ``Subset`` of one: ``table`` maps the outer index to the tensors' row, an int64
    tensor, else ``None``); ``None`` for any other dataset, or tensors that are not plain
    CPU tensors (on a GPU, needing grad, sparse)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    table = None
    subset = torch.utils.data.Subset
    try:
        while isinstance(dataset, subset) and type(dataset).__getitem__ is subset.__getitem__:
            inner = torch.as_tensor(np.asarray(dataset.indices, dtype=np.int64))
            table = inner if table is None else inner[table]
            dataset = dataset.dataset
    except (TypeError, ValueError):  # indices that are not a flat list of ints
        return None
    base = torch.utils.data.TensorDataset
    if not isinstance(dataset, base) or type(dataset).__getitem__ is not base.__getitem__:
        return None
    tensors = tuple(dataset.tensors)
    if not tensors or not all(
        type(t) is torch.Tensor and t.device.type == "cpu" and t.layout == torch.strided
        and not t.requires_grad and t.dim() >= 1 for t in tensors
    ):
        return None
    return tensors, table


def fits(tensors: Sequence[Any], leaves: Sequence[Any]) -> bool:
    """Whether leaf ``i`` of a flat tuple layout is row ``i`` of ``tensors[i]`` (shape and
    dtype), for every leaf: the whole sample can be taken by rows."""
    if len(tensors) != len(leaves):
        return False
    torch = sys.modules["torch"]
    for t, leaf in zip(tensors, leaves, strict=True):
        if leaf.shape is None or tuple(t.shape[1:]) != leaf.shape:
            return False
        try:
            if torch.from_numpy(np.empty(0, np.dtype(leaf.dtype))).dtype != t.dtype:
                return False
        except TypeError:  # a slot dtype torch has no view for
            return False
    return True


def take(found: tuple[tuple[Any, ...], Any], indices: Sequence[int],
         out: Mapping[int, np.ndarray]) -> None:
    """Rows ``indices`` of tensor ``i`` of ``found`` (:func:`columns`' answer) into
    ``out[i]`` (``len(indices)`` rows each).

    Raises:
        IndexError: an index outside the dataset.
    """
    tensors, table = found
    torch = sys.modules["torch"]
    idx = torch.as_tensor(np.asarray(indices, dtype=np.int64))
    size = len(tensors[0]) if table is None else len(table)
    if len(idx) and (int(idx.min()) < 0 or int(idx.max()) >= size):
        raise IndexError(f"an index of the batch is outside the dataset's {size} samples")
    if table is not None:
        idx = table[idx]
    for i, dst in out.items():
        torch.index_select(tensors[i], 0, idx, out=torch.from_numpy(dst))
