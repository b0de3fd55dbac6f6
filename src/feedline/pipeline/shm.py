"""A shared-memory arena of batch slots for process workers.

One file in ``shm_dir`` (``/dev/shm`` by default) holds ``count`` slots laid
out by the batch :class:`~feedline.pipeline.collate.Layout`. The parent creates
and reserves it (``posix_fallocate``, so a full tmpfs is an error now rather
than a SIGBUS later). This module does not import torch.

Nothing is left in ``shm_dir``, whatever kills the training process and when:

* The name is unlinked right after creation; the parent keeps the file open and
  workers open it through ``/proc/<parent pid>/fd/<fd>`` (:attr:`ArenaSpec.path`).
  The memory lives as long as a process has it open or mapped and goes back to
  the kernel when the last one exits, ``kill -9`` included.
* Where ``/proc`` cannot reopen a descriptor, the name stays until every worker
  has mapped it (:func:`release`). Names are ``feedline-<owner pid>-<hex>``:
  :func:`create` first removes (:func:`reap`) those whose owner process is gone,
  which covers a parent killed in the microseconds between create and unlink.
"""

from __future__ import annotations

import mmap
import os
import re
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
    """What workers open: ``/proc/<pid>/fd/<fd>`` (name already unlinked) or the file."""
    layout: Layout
    count: int
    owner: int = 0
    """Pid of the process that created the arena and holds :attr:`fd`."""
    fd: int = -1
    """The owner's descriptor of the arena (-1: none held)."""

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
            fix=f"make {shm_dir} larger (docker --shm-size for /dev/shm) or pass shm_dir= a "
            'tmpfs folder with room, lower batch_size, prefetch or workers, or use worker_type="thread" '
            "(no shared memory)",
        )


_NAME = re.compile(r"feedline-(\d+)-[0-9a-f]{32}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process (or no permission to ask): keep its arena
        return True
    return True


def reap(shm_dir: str) -> list[str]:
    """Remove arenas in ``shm_dir`` whose owner process no longer exists.

    Only names this module makes (``feedline-<pid>-<32 hex>``) are looked at; an owner
    that is alive (or whose pid was reused) keeps its file. Returns the paths removed.
    """
    removed: list[str] = []
    try:
        names = os.listdir(shm_dir)
    except OSError:
        return removed
    for name in names:
        m = _NAME.fullmatch(name)
        if m is None or _alive(int(m.group(1))):
            continue
        path = os.path.join(shm_dir, name)
        try:
            os.unlink(path)
        except OSError:
            continue  # removed meanwhile, or not ours to remove
        removed.append(path)
    return removed


def check_dir(shm_dir: str) -> None:
    """Raise :class:`ResourceError` unless ``shm_dir`` is a writable directory."""
    fix = 'pass shm_dir= a writable directory on a tmpfs (default "/dev/shm")'
    if not os.path.isdir(shm_dir):
        what = "does not exist" if not os.path.exists(shm_dir) else "is not a directory"
        raise ResourceError(f"shm_dir {shm_dir} {what}", path=shm_dir, fix=fix)
    if not os.access(shm_dir, os.W_OK | os.X_OK):
        raise ResourceError(f"shm_dir {shm_dir} is not writable", path=shm_dir, fix=fix)


def create(shm_dir: str, layout: Layout, count: int) -> ArenaSpec:
    """Create and reserve the arena; its name is gone from ``shm_dir`` on return where
    ``/proc`` allows (see the module docstring). Call :func:`release` once every worker
    has opened :attr:`ArenaSpec.path`.

    Raises:
        ResourceError: ``shm_dir`` is not a writable directory or has too little space.
    """
    check_dir(shm_dir)
    reap(shm_dir)
    pid = os.getpid()
    path = os.path.join(shm_dir, f"feedline-{pid}-{uuid.uuid4().hex}")
    spec = ArenaSpec(path, layout, count, owner=pid)
    check_space(shm_dir, spec.size)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise ResourceError(f"cannot create the arena in {shm_dir}: {exc}", path=shm_dir,
                            fix='pass shm_dir= a writable tmpfs directory or use '
                            'worker_type="thread"') from exc
    try:
        os.posix_fallocate(fd, 0, spec.size)
    except OSError as exc:
        os.close(fd)
        os.unlink(path)
        raise ResourceError(
            f"cannot reserve {format_bytes(spec.size)} in {shm_dir}: {exc}", path=shm_dir,
            fix=f"make {shm_dir} larger (docker --shm-size for /dev/shm) or pass shm_dir= a tmpfs "
            "folder with room, or lower batch_size, prefetch or workers",
        ) from exc
    by_fd = f"/proc/{pid}/fd/{fd}"
    if os.path.exists(by_fd):
        os.unlink(path)
        return ArenaSpec(by_fd, layout, count, owner=pid, fd=fd)
    return ArenaSpec(path, layout, count, owner=pid, fd=fd)


def release(spec: ArenaSpec) -> None:
    """The owner's part once every worker has the arena open: close the descriptor
    (and remove the name if it is still there). Mappings stay valid. Call it once:
    the descriptor number may be reused afterwards."""
    if spec.owner != os.getpid() or spec.fd < 0:
        return
    if not spec.path.startswith("/proc/"):
        try:
            os.unlink(spec.path)
        except FileNotFoundError:
            pass
    os.close(spec.fd)


class Arena:
    """A mapping of an arena file with numpy views per slot."""

    def __init__(self, spec: ArenaSpec) -> None:
        self.spec = spec
        fd = os.open(spec.path, os.O_RDWR)
        try:
            self._map: mmap.mmap | None = mmap.mmap(fd, spec.size)
        except OSError as exc:  # ENOMEM: no address space left for it (RLIMIT_AS)
            from feedline.pipeline.jobs import out_of_memory_fix

            raise ResourceError(f"cannot map the {format_bytes(spec.size)} shared-memory arena of "
                                f"{spec.count} batch slots: {exc}", stage="collate",
                                fix=out_of_memory_fix()) from exc
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
            try:
                self._map.close()
            except BufferError:  # a view still lives (a batch or traceback kept by the caller):
                pass             # the mapping goes with the last view
            self._map = None
