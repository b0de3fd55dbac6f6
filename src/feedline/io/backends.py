"""One reader interface, four backends, and the ``io="auto"`` decision.

Every backend implements :class:`Reader`: ``open(path) -> handle``,
``read_into(handle, offset, buffer) -> int`` (bytes read; fewer than the
buffer only at end of file) and ``close(handle)``. ``direct`` is True when the
backend needs 4096-aligned offsets, buffer addresses and sizes; ``device``
is where its buffers live (``"cpu"`` or ``"cuda"``).

* ``buffered``: ``os.preadv`` through the page cache (GIL released).
* ``direct``: O_DIRECT into aligned host buffers; falls back to buffered, with
  one warning, where the file system refuses O_DIRECT.
* ``gds``: KvikIO ``CuFile.pread`` into device memory (optional extra).
* ``auto``: ``gds`` only when GPUDirect Storage is really engaged, otherwise
  ``buffered``; :func:`choose_backend` returns the decision and its reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from feedline.io._gds import GdsReader, gds_status
from feedline.io._posix import BufferedReader, DirectReader, probe_direct
from feedline.io._remote import RemoteReader

IO_CHOICES = ("auto", "buffered", "direct", "gds")


@runtime_checkable
class Reader(Protocol):
    """What every backend does. Implementations must be safe to call from many threads."""

    name: str
    device: str
    direct: bool

    def open(self, path: str) -> Any:
        """Open ``path``; the returned handle is passed back to the other methods."""
        ...

    def read_into(self, handle: Any, offset: int, buffer: Any) -> int:
        """Fill ``buffer`` from ``offset``; return the bytes read (fewer only at EOF)."""
        ...

    def close(self, handle: Any) -> None:
        """Release ``handle``."""
        ...


@dataclass(frozen=True)
class BackendChoice:
    """The backend a dataset reads with, and why."""

    requested: str
    name: str
    reason: str


def choose_backend(io: str) -> BackendChoice:
    """Resolve ``io`` ("auto", "buffered", "direct", "gds") to a backend name with a reason.

    ``auto`` picks ``gds`` only when :func:`gds_status` says GDS is engaged
    (kvikio importable, CUDA present, KvikIO compat mode off); otherwise
    ``buffered``, which uses the page cache (ask for ``direct`` to bypass it).

    Raises:
        ValueError: ``io`` is not one of :data:`IO_CHOICES`.
    """
    if io not in IO_CHOICES:
        raise ValueError(f"io must be one of {IO_CHOICES}, got {io!r}")
    if io != "auto":
        return BackendChoice(io, io, f"io={io!r} requested")
    engaged, why = gds_status()
    if engaged:
        return BackendChoice(io, "gds", why)
    return BackendChoice(io, "buffered", f"{why}; buffered reads through the page cache")


def make_reader(name: str) -> Reader:
    """A fresh reader for a resolved backend name (not ``auto``).

    Raises:
        DeviceError: ``gds`` without kvikio or CUDA (the message has the fix).
        ValueError: unknown name.
    """
    if name == "buffered":
        return BufferedReader()
    if name == "direct":
        return DirectReader()
    if name == "gds":
        return GdsReader()
    raise ValueError(f"unknown backend {name!r}; expected buffered, direct or gds")


__all__ = [
    "IO_CHOICES",
    "BackendChoice",
    "BufferedReader",
    "DirectReader",
    "GdsReader",
    "Reader",
    "RemoteReader",
    "choose_backend",
    "gds_status",
    "make_reader",
    "probe_direct",
]
