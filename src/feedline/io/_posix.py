"""Host readers: ``buffered`` (pread through the page cache) and ``direct`` (O_DIRECT).

Both implement the :class:`~feedline.io.backends.Reader` interface and read
with ``os.preadv``, which releases the GIL, straight into the caller's buffer:
no intermediate ``bytes`` object is created.
"""

from __future__ import annotations

import errno
import os
import threading
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from feedline.errors import AlignmentError, ReadError, ResourceError
from feedline.format._files import open_fd
from feedline.io._buffers import PAGE, buffer_address

_O_DIRECT = getattr(os, "O_DIRECT", 0)


def _os_open_direct(path: str) -> int:
    """Open regular file ``path`` read-only with O_DIRECT (a seam the tests can replace)."""
    return open_fd(path, _O_DIRECT)


def open_error(e: OSError, path: str) -> ReadError | ResourceError:
    """The error for a failed open of ``path``: out of file descriptors is a resource
    limit with its fix, anything else a read error."""
    if e.errno in (errno.EMFILE, errno.ENFILE):
        return ResourceError(f"cannot open {path}: {e.strerror}", path=path,
                             fix="raise the open-file limit (ulimit -n), or close other files "
                                 "this process holds")
    return ReadError(f"cannot open {path}: {e.strerror}", path=path,
                     fix="the file was removed, moved or made unreadable after the dataset was "
                         "opened: restore it (re-copy the dataset) and run `feedline verify`")


def _open_plain(path: str) -> int:
    try:
        return open_fd(path)  # a FIFO or device put in a shard's place is refused, not waited on
    except OSError as e:
        raise open_error(e, path) from e


def _nbytes(buffer: Any) -> int:
    return int(buffer.nbytes) if isinstance(buffer, (np.ndarray, memoryview)) else memoryview(buffer).nbytes


def pread_into(fd: int, offset: int, buffer: Any, *, stop_on_partial_block: bool = False) -> int:
    """Fill ``buffer`` from ``fd`` at ``offset``; return the bytes read (< len at EOF).

    Loops over short reads. With ``stop_on_partial_block`` (O_DIRECT), a read
    that ends off a block boundary is end of file and stops the loop, since
    another O_DIRECT read at an unaligned offset would fail.
    """
    want = _nbytes(buffer)
    got = os.preadv(fd, [buffer], offset) if want else 0  # the common case: one call
    if got == 0 or got == want or (stop_on_partial_block and got % PAGE):
        return got
    view = memoryview(buffer).cast("B")
    while got < want:
        try:
            n = os.preadv(fd, [view[got:]], offset + got)
        except InterruptedError:
            continue
        if n == 0:
            break
        got += n
        if stop_on_partial_block and n % PAGE:
            break
    return got


class BufferedReader:
    """``pread`` through the page cache into any writable host buffer."""

    name = "buffered"
    device = "cpu"
    direct = False

    def open(self, path: str) -> int:
        """Open ``path`` for reading; the handle is a file descriptor."""
        return _open_plain(path)

    def read_into(self, handle: Any, offset: int, buffer: Any) -> int:
        """Read ``len(buffer)`` bytes at ``offset`` (fewer at end of file); GIL released."""
        try:
            n = os.preadv(handle, [buffer], offset)  # the common case: one call fills it
            if n == 0 or n == _nbytes(buffer):
                return n
            return n + pread_into(handle, offset + n, memoryview(buffer).cast("B")[n:])
        except OSError as e:
            raise ReadError(f"read of {memoryview(buffer).nbytes} bytes at {offset} failed: {e.strerror}") from e

    def close(self, handle: Any) -> None:
        """Close a handle from :meth:`open`."""
        os.close(int(handle))


@dataclass(frozen=True, slots=True)
class DirectHandle:
    """An open file of the direct reader; ``direct`` is False after a fallback."""

    fd: int
    direct: bool


class DirectReader:
    """O_DIRECT reads that bypass the page cache, into 4096-aligned host buffers.

    Offsets, buffer addresses and sizes must be multiples of 4096 (the planner
    makes windows so); the read of the final partial block of a file returns
    the bytes up to end of file. On a file system that refuses O_DIRECT
    (``EINVAL`` at open, e.g. tmpfs on older kernels) the reader warns once and
    reads that file buffered; :attr:`fallback_reason` says why.
    """

    name = "direct"
    device = "cpu"
    direct = True

    def __init__(self) -> None:
        self.fallback_reason: str | None = None
        self._warned = False
        self._lock = threading.Lock()

    def open(self, path: str) -> DirectHandle:
        """Open ``path`` with O_DIRECT, or buffered (with one warning) if refused."""
        if not _O_DIRECT:
            return self._fallback(path, "this platform has no O_DIRECT")
        try:
            return DirectHandle(_os_open_direct(path), True)
        except OSError as e:
            if e.errno != errno.EINVAL:
                raise open_error(e, path) from e
            return self._fallback(path, f"the file system of {path} refuses O_DIRECT (EINVAL)")

    def _fallback(self, path: str, reason: str) -> DirectHandle:
        with self._lock:
            self.fallback_reason = reason
            warn = not self._warned
            self._warned = True
        if warn:
            warnings.warn(f"io='direct': {reason}; reading buffered instead", RuntimeWarning, stacklevel=3)
        return DirectHandle(_open_plain(path), False)

    def read_into(self, handle: Any, offset: int, buffer: Any) -> int:
        """Read into an aligned ``buffer`` at an aligned ``offset``; short only at EOF.

        Raises:
            AlignmentError: offset, buffer address or size is not a multiple of 4096.
            ReadError: the read failed.
        """
        h: DirectHandle = handle
        size = memoryview(buffer).nbytes
        if h.direct:
            from feedline.model.gds import check_alignment

            ok, reason = check_alignment(offset, buffer_address(buffer), size, PAGE)
            if not ok:
                raise AlignmentError(reason or "alignment violated", fix="use buffers from the aligned pool")
        try:
            return pread_into(h.fd, offset, buffer, stop_on_partial_block=h.direct)
        except OSError as e:
            raise ReadError(f"O_DIRECT read of {size} bytes at {offset} failed: {e.strerror}") from e

    def close(self, handle: Any) -> None:
        """Close a handle from :meth:`open`."""
        os.close(handle.fd)


def probe_direct(directory: str) -> tuple[bool, str]:
    """Whether files in ``directory`` can be opened with O_DIRECT, and why not.

    Creates, opens and removes one small temporary file. A directory where
    that file cannot be made or written (read-only, full, missing) is a
    "no" with the reason, not an error: the caller's own write then fails
    with its typed error (before: a raw ``OSError`` from the probe, so
    ``Checkpointer.save`` with ``io="auto"`` on a full disk raised ENOSPC raw).
    """
    import tempfile

    if not _O_DIRECT:
        return False, "this platform has no O_DIRECT"
    try:
        fd, path = tempfile.mkstemp(dir=directory, prefix=".feedline-odirect-")
    except OSError as e:
        return False, f"cannot create a probe file in {directory}: {e.strerror}"
    try:
        try:
            os.write(fd, b"\0" * PAGE)
        except OSError as e:
            return False, f"cannot write a probe file in {directory}: {e.strerror}"
        try:
            os.close(_os_open_direct(path))
        except OSError as e:
            return False, f"O_DIRECT open refused in {directory}: {e.strerror}"
        return True, f"O_DIRECT works in {directory}"
    finally:
        os.close(fd)
        os.unlink(path)
