"""feedline.io: move bytes from storage into buffers, fast, by every path.

* :func:`open_dataset` / :class:`PackedDataset`: random and batched access to a
  packed dataset (local folder or fsspec URL), zero-copy views of each field;
  ``PackedDataset.subset(indices)`` / :class:`PackedSubset`: a split of one.
* :mod:`feedline.io.backends`: one :class:`Reader` interface; ``buffered``,
  ``direct`` (O_DIRECT), ``gds`` (KvikIO) and the ``auto`` decision.
* :mod:`feedline.io.planner`: coalescing extents into aligned, bounded windows.

Importing this package imports neither torch nor kvikio nor fsspec.
"""

from __future__ import annotations

from feedline.io._buffers import HostBufferPool, aligned_empty, buffer_address
from feedline.io._subset import PackedSubset
from feedline.io.backends import (
    IO_CHOICES,
    BackendChoice,
    BufferedReader,
    DirectReader,
    GdsReader,
    Reader,
    RemoteReader,
    choose_backend,
    gds_status,
    make_reader,
    probe_direct,
)
from feedline.io.dataset import PackedDataset, open_dataset
from feedline.io.planner import Window, coalesce, validate_direct

__all__ = [
    "IO_CHOICES",
    "BackendChoice",
    "BufferedReader",
    "DirectReader",
    "GdsReader",
    "HostBufferPool",
    "PackedDataset",
    "PackedSubset",
    "Reader",
    "RemoteReader",
    "Window",
    "aligned_empty",
    "buffer_address",
    "choose_backend",
    "coalesce",
    "gds_status",
    "make_reader",
    "open_dataset",
    "probe_direct",
    "validate_direct",
]
