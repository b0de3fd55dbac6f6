"""Atomic file writes: temp file in the same folder, fsync, rename, fsync the folder.

Large files are flushed as they are written: :func:`start_writeback` asks the
kernel (Linux ``sync_file_range(SYNC_FILE_RANGE_WRITE)``) to begin writing a
range to disk without waiting, so the device works while the writer keeps
going and the final ``fsync`` only waits for the tail.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys
from pathlib import Path
from typing import Any

_SYNC_FILE_RANGE_WRITE = 2


@functools.cache
def _sync_file_range() -> Any:
    """libc's ``sync_file_range`` (looked up once), or None where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    fn.restype = ctypes.c_int
    return fn


def start_writeback(fd: int, offset: int, length: int) -> bool:
    """Start writing ``[offset, offset + length)`` of ``fd`` to disk; do not wait.

    Only a hint: durability still comes from ``fsync``. Returns False where the
    platform or file system cannot do it (nothing else happens then).
    """
    fn = _sync_file_range()
    if fn is None or length <= 0:
        return False
    return int(fn(fd, offset, length, _SYNC_FILE_RANGE_WRITE)) == 0


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Flush a directory entry change (a rename or unlink) to stable storage."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_name(path: str | os.PathLike[str]) -> Path:
    """The temp name used while ``path`` is being written (same folder, hidden)."""
    p = Path(path)
    return p.with_name(f".{p.name}.partial")


def publish(temp: str | os.PathLike[str], final: str | os.PathLike[str], *, durable: bool = True) -> None:
    """Rename a fully written (and, if ``durable``, fsynced) ``temp`` onto ``final``; fsync the folder."""
    os.replace(temp, final)
    if durable:
        fsync_dir(Path(final).parent)


def named(error: OSError, path: str | os.PathLike[str]) -> OSError:
    """``error`` with ``path`` as its file name when it has none (a failed
    ``write``/``fsync`` on a full disk names no file), for a one-line report."""
    if error.filename is not None:
        return error
    return type(error)(error.errno, error.strerror, str(path))


def write_atomic(path: str | os.PathLike[str], data: bytes, *, durable: bool = True) -> None:
    """Write ``data`` to ``path`` so readers see either the old file or all of the new one.

    ``durable=False`` skips the fsyncs: still atomic for readers and against a
    killed process, but a power loss may lose the new file. On an error the
    temp file is removed and the error names ``path``.
    """
    temp = temp_name(path)
    try:
        with open(temp, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        publish(temp, path, durable=durable)
    except OSError as e:
        remove_quietly(temp)
        raise named(e, path) from None


def remove_quietly(path: str | os.PathLike[str]) -> None:
    """Unlink ``path`` if it exists (a missing file is fine, other errors propagate)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
