"""A shared-memory arena of batch slots for process workers.

One file in ``shm_dir`` (``/dev/shm`` by default) holds ``count`` slots laid
out by the batch :class:`~feedline.pipeline.collate.Layout`. The parent creates
and reserves it (``posix_fallocate``, so a full tmpfs is an error now rather
than a SIGBUS later); workers map it by path; the parent unlinks the file once
every worker has mapped it, so nothing is left in ``shm_dir`` even if the
process is killed. This module does not import torch.
"""

from __future__ import annotations

import mmap
import os
import shutil
import uuid
from dataclasses import dataclass

import numpy as np

from feedline.errors import ResourceError
from feedline.pipeline.collate import Layout, Path
from feedline.units import format_bytes

ALIGN = 4096


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


@dataclass(frozen=True)
class ArenaSpec:
    """Where the arena lives and how it is laid out (sent to workers)."""

    path: str
    layout: Layout
    count: int

    @property
    def slot_bytes(self) -> int:
        used = sum(_round_up(self.layout.leaf_bytes(leaf), 64) for leaf in self.layout.dense)
        return _round_up(max(used, 1), ALIGN)

    @property
    def size(self) -> int:
        return self.slot_bytes * self.count


def check_space(shm_dir: str, need: int) -> None:
    """Raise :class:`ResourceError` when ``shm_dir`` has less than ``need`` bytes free."""
    try:
        free = shutil.disk_usage(shm_dir).free
    except OSError as exc:
        raise ResourceError(f"cannot read free space of {shm_dir}: {exc}", path=shm_dir) from exc
    if free < need:
        raise ResourceError(
            f"process workers need {format_bytes(need)} of shared memory in {shm_dir}, "
            f"only {format_bytes(free)} is free",
            path=shm_dir, stage="collate",
            fix="raise /dev/shm (docker --shm-size), lower batch_size, prefetch or workers, "
            'or use worker_type="thread" (no shared memory)',
        )


def create(shm_dir: str, layout: Layout, count: int) -> ArenaSpec:
    """Create and reserve the arena file.

    Raises:
        ResourceError: not enough space in ``shm_dir``.
    """
    spec = ArenaSpec(os.path.join(shm_dir, f"feedline-{os.getpid()}-{uuid.uuid4().hex}"),
                     layout, count)
    check_space(shm_dir, spec.size)
    fd = os.open(spec.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.posix_fallocate(fd, 0, spec.size)
    except OSError as exc:
        os.close(fd)
        os.unlink(spec.path)
        raise ResourceError(
            f"cannot reserve {format_bytes(spec.size)} in {shm_dir}: {exc}", path=shm_dir,
            fix="raise /dev/shm (docker --shm-size) or lower batch_size, prefetch or workers",
        ) from exc
    os.close(fd)
    return spec


class Arena:
    """A mapping of an arena file with numpy views per slot."""

    def __init__(self, spec: ArenaSpec) -> None:
        self.spec = spec
        fd = os.open(spec.path, os.O_RDWR)
        try:
            self._map: mmap.mmap | None = mmap.mmap(fd, spec.size)
        finally:
            os.close(fd)
        self._views: list[dict[Path, np.ndarray]] = [self._slot(i) for i in range(spec.count)]

    def _slot(self, index: int) -> dict[Path, np.ndarray]:
        assert self._map is not None
        views: dict[Path, np.ndarray] = {}
        offset = index * self.spec.slot_bytes
        layout = self.spec.layout
        for leaf in layout.dense:
            assert leaf.shape is not None and leaf.dtype is not None
            dtype = np.dtype(leaf.dtype)
            count = layout.leaf_bytes(leaf) // dtype.itemsize
            arr = np.frombuffer(self._map, dtype=dtype, count=count, offset=offset)
            views[leaf.path] = arr.reshape((layout.batch_size, *leaf.shape))
            offset += _round_up(layout.leaf_bytes(leaf), 64)
        return views

    def slot(self, index: int) -> dict[Path, np.ndarray]:
        """The numpy arrays of slot ``index`` (full batch size)."""
        return self._views[index]

    def close(self) -> None:
        """Drop the views and unmap (views handed out must be gone by now)."""
        self._views = []
        if self._map is not None:
            self._map.close()
            self._map = None
