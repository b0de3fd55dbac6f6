"""Writer backends: put a staged buffer into a file and make it durable.

Every writer implements ``write(path, buf, nbytes, overwrite=False)``: create
``path``, write the first ``nbytes`` of ``buf`` (a 4096-aligned staging buffer),
fsync, close. With ``overwrite`` the file at ``path`` (a rotated checkpoint's
data, recycled by the checkpointer) is written over in place and cut to
``nbytes``: its blocks are already allocated, so the file system neither
allocates nor frees (and, mounted with ``discard``, trims) a gigabyte per save.

* ``buffered``: ``pwritev`` through the page cache in 64 MiB pieces, each
  handed to the kernel's writeback at once so the final fsync only waits for
  the tail; after the fsync the file's pages are dropped from the cache
  (``POSIX_FADV_DONTNEED``), so a checkpoint does not evict the dataset the
  loader reads from the page cache.
* ``direct``: O_DIRECT ``pwritev`` of the aligned body in 8 MiB pieces
  (bypasses the page cache, like ``dd oflag=direct``); the unaligned tail
  (``nbytes % 4096``) is written through a second, buffered descriptor. Where
  the file system refuses O_DIRECT the writer says why and writes buffered.
* ``gds``: KvikIO ``CuFile.pwrite`` from device memory (GPUDirect Storage).

:func:`choose_writer` resolves ``io="auto"``: ``gds`` when GDS is engaged and
the state is on a GPU, else ``direct`` when the directory accepts O_DIRECT,
else ``buffered``, with the reason.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from typing import Any, Protocol

from feedline.errors import ConfigError, WriteError
from feedline.format._atomic import start_writeback
from feedline.io._buffers import PAGE
from feedline.io._gds import gds_status
from feedline.io._posix import probe_direct

IO_CHOICES = ("auto", "buffered", "direct", "gds")
_BUFFERED_PIECE = 64 << 20
_DIRECT_PIECE = 8 << 20
_O_DIRECT = getattr(os, "O_DIRECT", 0)
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
_OVERWRITE = os.O_WRONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)


class Writer(Protocol):
    """What every writer backend does."""

    name: str

    def write(self, path: str, buf: Any, nbytes: int, *, overwrite: bool = False) -> None:
        """Write ``buf[:nbytes]`` to a new file at ``path`` (``overwrite``: over the file there) and fsync it."""
        ...


def _write_error(path: str, e: OSError) -> WriteError:
    if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        fix = "free space on that file system (or lower keep=), or save to a larger one"
    else:
        fix = "check the directory is writable and the device healthy"
    return WriteError(f"writing checkpoint data failed: {e.strerror or e}", path=path, fix=fix)


def _pwrite_all(fd: int, view: memoryview, offset: int) -> None:
    done = 0
    while done < len(view):
        try:
            n = os.pwritev(fd, [view[done:]], offset + done)
        except InterruptedError:
            continue
        if n == 0:
            raise OSError(errno.ENOSPC, "no space left (write returned 0)")
        done += n


def _open(path: str, flags: int, nbytes: int, overwrite: bool) -> int:
    """``os.open`` for a writer; with ``overwrite``, the existing file is cut to ``nbytes`` first
    (never grown: a shorter one is extended by the writes themselves)."""
    fd = os.open(path, (_OVERWRITE if overwrite else _CREATE) | flags, 0o644)
    if overwrite:
        try:
            if os.fstat(fd).st_size > nbytes:
                os.ftruncate(fd, nbytes)
        except OSError:
            os.close(fd)
            raise
    return fd


def open_direct(path: str, *, nbytes: int = 0, overwrite: bool = False) -> int | None:
    """``path`` created (truncated; with ``overwrite``, kept and cut to ``nbytes``) for O_DIRECT
    writes; ``None`` when its file system refuses O_DIRECT (EINVAL at open: ramfs, older tmpfs,
    some FUSE and overlay mounts), for the caller to write buffered and say why
    (:func:`refused_direct`).

    Raises:
        WriteError: any other failure to create it (permissions, full disk...).
    """
    try:
        return _open(path, _O_DIRECT, nbytes, overwrite)
    except OSError as e:
        if e.errno == errno.EINVAL:
            return None
        raise _write_error(path, e) from e


def refused_direct(path: str) -> str:
    """Why writes to ``path`` went buffered after :func:`open_direct` returned None."""
    return f"the file system of {os.path.dirname(path) or '.'} refuses O_DIRECT (EINVAL)"


def drop_cached(fd: int) -> None:
    """Drop ``fd``'s clean pages from the page cache (a hint; no-op where unsupported)."""
    if hasattr(os, "posix_fadvise"):
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError:
            pass  # a file system without fadvise: the pages stay cached, nothing else changes


def _bytes(buf: Any, nbytes: int) -> memoryview:
    return memoryview(buf).cast("B")[:nbytes]


class BufferedWriter:
    """``pwritev`` through the page cache, writeback started per 64 MiB piece, one fsync."""

    name = "buffered"

    def write(self, path: str, buf: Any, nbytes: int, *, overwrite: bool = False) -> None:
        """Write ``buf[:nbytes]`` to ``path`` and fsync it (raises :class:`WriteError`)."""
        view = _bytes(buf, nbytes)
        try:
            fd = _open(path, 0, nbytes, overwrite)
        except OSError as e:
            raise _write_error(path, e) from e
        try:
            for start in range(0, nbytes, _BUFFERED_PIECE):
                piece = view[start : start + _BUFFERED_PIECE]
                _pwrite_all(fd, piece, start)
                start_writeback(fd, start, len(piece))
            os.fsync(fd)
            drop_cached(fd)
        except OSError as e:
            raise _write_error(path, e) from e
        finally:
            os.close(fd)


class DirectWriter:
    """O_DIRECT writes of the aligned body, the unaligned tail written buffered, one fsync.

    ``fallback_reason`` is set (and writes go buffered) when the file system
    refuses O_DIRECT.
    """

    name = "direct"

    def __init__(self) -> None:
        self.fallback_reason: str | None = None if _O_DIRECT else "this platform has no O_DIRECT"

    def write(self, path: str, buf: Any, nbytes: int, *, overwrite: bool = False) -> None:
        """Write ``buf[:nbytes]`` (``buf`` 4096-aligned) to ``path`` and fsync it."""
        if self.fallback_reason is not None:
            return BufferedWriter().write(path, buf, nbytes, overwrite=overwrite)
        view = _bytes(buf, nbytes)
        body = nbytes - nbytes % PAGE
        fd = open_direct(path, nbytes=nbytes, overwrite=overwrite)
        if fd is None:
            self.fallback_reason = refused_direct(path)
            return BufferedWriter().write(path, buf, nbytes, overwrite=overwrite)
        try:
            done = 0
            for start in range(0, body, _DIRECT_PIECE):
                piece = view[start : min(start + _DIRECT_PIECE, body)]
                try:
                    _pwrite_all(fd, piece, start)
                except OSError as e:
                    # a file size limit (RLIMIT_FSIZE set in bytes) off a 512-byte boundary
                    # cuts a direct write there, which the kernel refuses as EINVAL: the
                    # rest goes buffered, where the limit is EFBIG
                    if e.errno != errno.EINVAL:
                        raise
                    break
                done = start + len(piece)
            if nbytes > done:  # the unaligned tail (or the rest after EINVAL), buffered
                tail_fd = os.open(path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
                try:
                    _pwrite_all(tail_fd, view[done:], done)
                finally:
                    os.close(tail_fd)
            os.fsync(fd)
        except OSError as e:
            raise _write_error(path, e) from e
        finally:
            os.close(fd)


class GdsWriter:
    """KvikIO ``CuFile.pwrite`` from a 4096-aligned device buffer, then fsync.

    Raises:
        DeviceError: at construction, when kvikio or CUDA is missing.
    """

    name = "gds"

    def __init__(self) -> None:
        from feedline.io._gds import _import_kvikio, _import_torch_cuda

        self._kvikio = _import_kvikio()
        _import_torch_cuda()

    def write(self, path: str, buf: Any, nbytes: int, *, overwrite: bool = False) -> None:
        """Write the device bytes ``buf[:nbytes]`` to ``path`` and fsync it (a recycled file is
        truncated as KvikIO opens it: ``overwrite`` gains nothing here)."""
        try:
            f = self._kvikio.CuFile(path, "w")
            try:
                done = f.pwrite(buf[:nbytes], nbytes, 0).get() if nbytes else 0
            finally:
                f.close()
            if done != nbytes:
                raise OSError(errno.ENOSPC, f"short GDS write ({done} of {nbytes} bytes)")
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            raise _write_error(path, e) from e
        except RuntimeError as e:
            raise WriteError(f"GDS write failed: {e}", path=path, fix="use io='direct'") from e


@dataclass(frozen=True)
class WriterChoice:
    """The writer a checkpointer uses, and why."""

    requested: str
    name: str
    reason: str


def choose_writer(io: str, directory: str, *, on_gpu: bool) -> WriterChoice:
    """Resolve ``io`` for a checkpoint directory; ``on_gpu``: the state has CUDA tensors.

    Raises:
        ConfigError: ``io`` is not one of :data:`IO_CHOICES`.
    """
    if io not in IO_CHOICES:
        raise ConfigError(f"io must be one of {IO_CHOICES}, got {io!r}", fix="pass io='auto'")
    if io != "auto":
        return WriterChoice(io, io, f"io={io!r} requested")
    reasons = []
    if on_gpu:
        engaged, why = gds_status()
        if engaged:
            return WriterChoice(io, "gds", why)
        reasons.append(why)
    else:
        reasons.append("gds not considered: the state is in host memory")
    ok, why = probe_direct(directory)
    if ok:
        return WriterChoice(io, "direct", "; ".join([*reasons, why]))
    return WriterChoice(io, "buffered", "; ".join([*reasons, why, "buffered writes"]))


def make_writer(name: str) -> BufferedWriter | DirectWriter | GdsWriter:
    """A writer for a resolved backend name (not ``auto``)."""
    if name == "buffered":
        return BufferedWriter()
    if name == "direct":
        return DirectWriter()
    if name == "gds":
        return GdsWriter()
    raise ConfigError(f"unknown writer {name!r}", fix="use buffered, direct or gds")
