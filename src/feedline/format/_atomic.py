"""Atomic file writes: temp file in the same folder, fsync, rename, fsync the folder."""

from __future__ import annotations

import os
from pathlib import Path


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


def publish(temp: str | os.PathLike[str], final: str | os.PathLike[str]) -> None:
    """Rename a fully written and fsynced ``temp`` onto ``final`` and fsync the folder."""
    os.replace(temp, final)
    fsync_dir(Path(final).parent)


def write_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` so readers see either the old file or all of the new one."""
    temp = temp_name(path)
    with open(temp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    publish(temp, path)


def remove_quietly(path: str | os.PathLike[str]) -> None:
    """Unlink ``path`` if it exists (a missing file is fine, other errors propagate)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
