"""Opening the files a dataset names: regular files only, never blocking, bounded reads;
and the path arguments of the public functions that take them.

A manifest, index or shard path may lead anywhere a hostile or damaged folder
points it: a FIFO (``open`` would wait forever for a writer), ``/dev/zero`` or
``/dev/urandom`` (a read would never end), a folder, a file of many GB where a
few KB are expected. :func:`open_regular` opens without blocking and refuses
anything but a regular file; :func:`read_regular` also reads at most ``limit``
bytes. Both raise ``OSError`` (with the path) so callers turn it into their own
typed error with the shard or path named.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Any, BinaryIO

from feedline.errors import ArgumentError, ConfigError, ReadError

CHANGED_FIX = ("the file changed after pack listed it: pack files that are not being written, moved or "
               "replaced, or rerun")
_CHANGED = (errno.ENOENT, errno.EISDIR, errno.ESPIPE, errno.EFBIG, errno.ELOOP, errno.ENXIO)
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # open_fd's extra flag: refuse a symbolic link
_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def open_fd(path: str | os.PathLike[str], extra_flags: int = 0) -> int:
    """A read-only descriptor of ``path``, which must be a regular file.

    Opened with ``O_NONBLOCK`` (which plain files ignore), so a FIFO put where a
    file belongs does not wait for a writer; it is then refused like a folder or
    a device.

    Raises:
        OSError: the file cannot be opened, or is not a regular file (``EISDIR``
            for a folder, ``ESPIPE`` for a FIFO, socket or device; ``ELOOP`` for a
            symbolic link with ``extra_flags`` :data:`NOFOLLOW`).
    """
    try:
        fd = os.open(path, _FLAGS | extra_flags)
    except OSError as e:
        if e.errno == errno.ELOOP and extra_flags & NOFOLLOW and os.path.islink(path):
            raise OSError(errno.ELOOP, "is a symbolic link now, where a file was listed", os.fspath(path)) from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            if stat.S_ISDIR(mode):
                raise IsADirectoryError(errno.EISDIR, "is a folder, not a file", os.fspath(path))
            raise OSError(errno.ESPIPE, "not a regular file (a FIFO, socket or device)", os.fspath(path))
        if _FLAGS & getattr(os, "O_NONBLOCK", 0):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """``open(path, "rb")`` for a regular file only, without blocking on a FIFO (see :func:`open_fd`)."""
    return os.fdopen(open_fd(path), "rb")


def read_regular(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of regular file ``path``, which must be shorter than ``limit``.

    Callers pass one more than the largest size they accept. A file the file
    system says is longer is refused before anything is read; one that grows
    while read comes back as ``limit`` bytes, which callers refuse by size.

    Raises:
        OSError: as :func:`open_fd`; ``EFBIG`` for a file of ``limit`` bytes or more.
    """
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        if size >= limit:
            raise OSError(errno.EFBIG, f"is {size} bytes, more than the {limit - 1} expected", os.fspath(path))
        return f.read(max(0, limit))


def source_error(e: OSError, path: str, **place: str) -> ReadError:
    """The ReadError for a source file pack cannot read, naming it and ``place``; a file
    deleted, replaced by something that is not a file, or grown since it was listed
    gets :data:`CHANGED_FIX`."""
    return ReadError(f"cannot read {path!r}: {e.strerror}", path=path, **place,
                     fix=CHANGED_FIX if e.errno in _CHANGED else None)


def path_argument(value: Any, name: str) -> str:
    """``value`` (a ``str`` or ``os.PathLike``) as a str path with ``~`` expanded.

    Raises:
        ArgumentError: another type (``None``, bytes, an int, a list...), an empty
            path, or one holding a NUL byte; ``field`` is ``name``.
        ConfigError: a relative path while the current folder no longer exists (deleted
            or moved away under the running process: ``os.getcwd()`` fails, and every
            resolution of the path with it, each as a bare ``FileNotFoundError`` naming no
            path); ``field`` is ``name``.
    """
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise ArgumentError(f"{name} must be a path (str or pathlib.Path), got {type(value).__name__} {value!r}",
                            field=name)
    if not value or "\0" in value:
        raise ArgumentError(f"{name} {value!r} is not a usable path", field=name,
                            fix="give a folder or file name (no NUL bytes)")
    path = os.path.expanduser(value)
    if not os.path.isabs(path) and "://" not in path:
        try:
            os.getcwd()
        except FileNotFoundError:
            raise ConfigError(
                f"{name} {value!r} is relative, but the current folder no longer exists "
                "(it was deleted or moved away while this process ran in it)", field=name,
                fix="cd to an existing folder, or give an absolute path") from None
    return path


def path_list(value: Any, name: str) -> list[str]:
    """One path or an iterable of paths as a list of str paths (see :func:`path_argument`).

    Raises:
        ArgumentError: neither a path nor an iterable of paths.
    """
    if isinstance(value, (str, os.PathLike)):
        return [path_argument(value, name)]
    if isinstance(value, (bytes, bytearray)) or not hasattr(value, "__iter__"):
        raise ArgumentError(f"{name} must be a path or a list of paths, got {type(value).__name__} {value!r}",
                            field=name)
    return [path_argument(v, name) for v in value]
