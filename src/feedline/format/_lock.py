"""One writer per folder: an exclusive ``flock`` on a lock file in it, naming its holder.

Two writers in one folder undo each other: two ``feedline pack`` runs into one
``--out`` each remove the other's temp shards and rename their own shards over
the other's, so one run exits 0 having written a manifest whose checksums
belong to the other's shards; two Checkpointers rotate away each other's data
mid-save. The first writer takes the lock; a second one is refused at once,
naming the first one's pid.

The lock goes with the descriptor: a process killed in any way never leaves it
held. Its file holds the holder's pid; a dataset's is removed when its writer
ends (a checkpoint folder's stays), and one left by a killed writer means
nothing while no process holds its lock.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from feedline.errors import ConfigError, FeedlineError, WriteError
from feedline.format._files import open_regular

DATASET_LOCK = ".feedline-write.lock"
"""The lock file of a dataset folder, held by :func:`~feedline.format.pack` and
:func:`~feedline.format.index_tars` while they write it."""


def hold(path: Path, *, what: str, fix: str, kind: str = "", busy: type[FeedlineError] = ConfigError) -> int:
    """Take the exclusive lock on file ``path`` (created if missing); return its descriptor.

    ``what`` names the writer in the refusal ("another {what} (pid N) is writing
    into FOLDER"), ``kind`` the lock file ("cannot create the {kind} lock file").
    ``busy`` is the error class of the refusal. Returns -1 on a file system without ``flock`` (some network
    mounts): the writes then go unguarded, as they would without this lock.

    Raises:
        ConfigError: (or ``busy``) another process, or another descriptor of this one,
            holds it; ``path=`` the folder, with ``fix``.
        WriteError: the lock file cannot be created (a read-only folder...).
    """
    folder = path.parent
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as e:
            raise WriteError(f"cannot create the {kind + ' ' if kind else ''}lock file: {e.strerror}",
                             path=str(path), fix="write into a folder you can write to") from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            finally:
                os.close(fd)
            pid = f" (pid {holder})" if holder.isdigit() else ""  # the holder may not have written it yet
            raise busy(f"another {what}{pid} is writing into {folder}", path=str(folder), fix=fix) from None
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                return -1
            raise WriteError(f"cannot lock {str(path)!r}: {e.strerror}", path=str(path)) from e
        if _same_file(fd, path):
            break
        os.close(fd)  # its holder removed that file as it let go (release(remove=True)): take the new one
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)  # only to name the holder in the refusal above
    except OSError:
        pass  # a full disk: the lock holds without the pid
    return fd


def hold_dataset(folder: Path) -> int:
    """:func:`hold` the lock of dataset folder ``folder`` (:data:`DATASET_LOCK`), as pack and
    index_tars do while they write it.

    Raises:
        WriteError: another pack or index_tars holds it (a runtime condition: the
            CLI exits 1), or the lock file cannot be created.
    """
    return hold(folder / DATASET_LOCK, what="feedline pack or index", busy=WriteError,
                fix="wait for it to finish, or write into another folder (two runs into one folder "
                    "replace each other's shards, indexes and manifest)")


def writer_of(folder: Path) -> int | None:
    """The pid of the pack or index_tars writing dataset folder ``folder`` now, else None.

    Read from the lock file without taking its lock (a reader's shared lock, however
    brief, would make a writer starting at that moment refuse to start): the file is
    there while a writer runs (it removes it as it ends), and one a killed writer left
    names a pid that no longer runs. A reader uses it to explain a missing manifest.
    """
    try:
        with open_regular(folder / DATASET_LOCK) as f:  # a FIFO there is refused, not waited on
            holder = f.read(32).decode(errors="replace").strip()
    except OSError:
        return None
    if not holder.isdigit() or not 0 < int(holder) < 1 << 31:
        return None
    pid = int(holder)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:  # another user's process: it runs
        return pid
    return pid


def _same_file(fd: int, path: Path) -> bool:
    try:
        st, now = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino)


def release(fd: int, path: Path | None = None) -> None:
    """Let go of a lock :func:`hold` returned (-1: nothing to let go); with ``path``, remove
    the lock file first (while still held, so no one can hold the removed file's lock
    unnoticed: :func:`hold` checks that the file it locked is still the one at ``path``)."""
    if fd < 0:
        return
    if path is not None:
        try:
            os.unlink(path)
        except OSError:
            pass
    os.close(fd)
