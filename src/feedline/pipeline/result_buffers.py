"""Large buffers of a process worker's results, through reused shared memory.

A custom ``collate=`` in a process worker returns its batch as tensors (padded audio,
stacked camera images) that travel back pickled. torch's reducer sends a CPU storage of a
megabyte or more in a *new* shared-memory file each time (``share_memory_``: create,
size, fault in and copy every page, then pass the descriptor through multiprocessing's
resource sharer); for a 3 MB batch that was 16 ms of the worker's CPU, five times the
collate itself (the ``asr`` shape of ``bench/outside_shapes.py``: 2.5x the CPU per sample
of thread workers). Here each worker keeps a few anonymous shared-memory segments
(``memfd``) and reuses them: a big storage or numpy array is copied into a free segment
(the pages are already there after the first batches) and pickled as a reference to it
(:func:`persistent_id`); the training process maps that segment through
``/proc/<worker pid>/fd/<fd>``, copies the bytes into memory of its own
(:class:`Reader`), and tells the worker the segment is free again. Nothing is left in
``/dev/shm``: a memfd has no name and is gone when the worker exits.

With no free segment (all of them waiting for the parent: at most :data:`MOST` per
worker) or no ``/proc``, a buffer goes as before. This module does not import torch.
"""

from __future__ import annotations

import mmap
import os
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np

MOST = 8
"""Segments a worker keeps at most (each as large as the largest buffer it held)."""

MOST_BYTES = 256 << 20
"""Bytes of segments a worker keeps at most (a bigger buffer, or one that would pass this
with the others, goes as before)."""

FROM = 1 << 20
"""Buffers of at least this many bytes go through a segment (smaller ones by value)."""

TAG = "feedline-segment"


@dataclass
class _Segment:
    fd: int
    size: int
    view: mmap.mmap
    busy: bool = False


@dataclass
class Segments:
    """A worker's segments (created on first use, reused after the parent frees them)."""

    pid: int = field(default_factory=os.getpid)
    by_id: dict[int, _Segment] = field(default_factory=dict)
    next_id: int = 0
    taken: list[int] = field(default_factory=list)
    """Segments filled by the result being pickled (released again if it fails)."""

    @staticmethod
    def usable() -> Segments | None:
        """Segments for this process, or ``None`` where the parent could not open them
        (no ``memfd_create`` or no ``/proc``)."""
        if not hasattr(os, "memfd_create") or not os.path.isdir(f"/proc/{os.getpid()}/fd"):
            return None
        return Segments()

    def put(self, data: np.ndarray) -> tuple[int, int, int] | None:
        """Copy the bytes of ``data`` (a uint8 array) into a free segment; its reference
        ``(pid, fd, id)``, or ``None`` when every segment is busy."""
        n = data.nbytes
        free = sorted((s.size, k) for k, s in self.by_id.items() if not s.busy)
        fits = [k for size, k in free if size >= n]
        if fits:
            key = fits[0]
        else:
            if free and len(self.by_id) >= MOST:  # too small: replaced by a larger one
                self._drop(free[0][1])
            held = sum(seg.size for seg in self.by_id.values())
            if len(self.by_id) >= MOST or held + n > MOST_BYTES:
                return None
            key = self._create(n)
        seg = self.by_id[key]
        np.frombuffer(seg.view, np.uint8, n)[:] = data
        seg.busy = True
        self.taken.append(key)
        return (self.pid, seg.fd, key)

    def _create(self, n: int) -> int:
        size = -(-n // FROM) * FROM
        fd = os.memfd_create("feedline-result", getattr(os, "MFD_CLOEXEC", 0))
        try:
            os.ftruncate(fd, size)
            view = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        key, self.next_id = self.next_id, self.next_id + 1
        self.by_id[key] = _Segment(fd, size, view)
        return key

    def _drop(self, key: int) -> None:
        seg = self.by_id.pop(key)
        seg.view.close()
        os.close(seg.fd)

    def free(self, keys: list[int]) -> None:
        """The parent has copied these segments out: reuse them."""
        for key in keys:
            seg = self.by_id.get(key)
            if seg is not None:
                seg.busy = False

    def close(self) -> None:
        for key in list(self.by_id):
            self._drop(key)


def persistent_id(segments: Segments, obj: Any) -> tuple[Any, ...] | None:
    """The pickle reference of ``obj`` when it is a big CPU buffer copied into a segment:
    a torch ``UntypedStorage`` (what a tensor's reducer pickles) or a plain numpy array."""
    if type(obj) is np.ndarray:
        if obj.nbytes < FROM or obj.dtype.hasobject or obj.dtype.fields is not None:
            return None
        ref = segments.put(np.ascontiguousarray(obj).reshape(-1).view(np.uint8))
        return None if ref is None else (TAG, ref, obj.nbytes, "numpy", obj.dtype.str, obj.shape)
    torch = sys.modules.get("torch")
    if torch is None or type(obj) is not torch.UntypedStorage:
        return None
    if obj.device.type != "cpu" or obj.nbytes() < FROM:
        return None
    data = torch.empty(0, dtype=torch.uint8).set_(obj).numpy()
    ref = segments.put(data)
    return None if ref is None else (TAG, ref, obj.nbytes(), "storage", None, None)


class Reader:
    """The training process's side: copy each referenced segment out, remember it to
    free (:meth:`take_freed`, sent back to its worker after the message is read)."""

    def __init__(self) -> None:
        self.freed: list[int] = []

    def load(self, pid: tuple[Any, ...]) -> Any:
        if not (isinstance(pid, tuple) and len(pid) == 6 and pid[0] == TAG):
            raise ValueError(f"unknown pickle reference {pid!r}")
        _, (wpid, fd, key), nbytes, kind, dtype, shape = pid
        with open(f"/proc/{wpid}/fd/{fd}", "rb") as f:
            flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
            view = mmap.mmap(f.fileno(), nbytes, flags=flags, prot=mmap.PROT_READ)
        try:
            src = np.frombuffer(view, np.uint8, nbytes)
            if kind == "numpy":
                out: Any = np.empty(shape, np.dtype(dtype))
                out.reshape(-1).view(np.uint8)[:] = src
            else:
                import torch

                out = torch.empty(nbytes, dtype=torch.uint8)
                out.numpy()[:] = src
                out = out.untyped_storage()
            del src
        finally:
            view.close()
        self.freed.append(key)
        return out

    def take_freed(self) -> list[int]:
        freed, self.freed = self.freed, []
        return freed
