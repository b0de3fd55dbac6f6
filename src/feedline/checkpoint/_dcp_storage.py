"""DCP interop, the write side: ``dcp.save``/``dcp.async_save`` writing with feedline's I/O.

:class:`DCPWriter` is a ``torch.distributed.checkpoint.FileSystemWriter`` whose
data files go through a :class:`DirectStream`: the serialised bytes are
gathered into one 4096-aligned buffer per file and written with O_DIRECT in
8 MiB pieces (bypassing the page cache, as :class:`~feedline.checkpoint.
Checkpointer` writes), the unaligned tail through a second, buffered
descriptor, and both fsynced before the file is closed. Its ``.metadata`` is
renamed into place and the directory fsynced, so a committed checkpoint
survives a power cut. ``durable=False`` skips every fsync (DCP's
``sync_files=False`` too) and keeps the rename: a crash of the process still
leaves the previous checkpoint whole, a power cut may lose the newest one. The files are DCP's own: ``dcp.load`` (its stock
``FileSystemReader``) reads them, and a checkpoint written by the stock writer
loads the same way.

``io="auto"`` writes direct where the directory accepts O_DIRECT and says why
not otherwise (:attr:`DCPWriter.choice`); ``"buffered"`` keeps DCP's own
buffered writes (plus the durable rename). GDS is not offered: DCP serialises
tensors from host memory.

This module imports ``torch.distributed.checkpoint``; ``feedline.checkpoint`` loads it
on first use of :class:`DCPWriter`.
"""

from __future__ import annotations

import io as _io
import os
from collections.abc import Generator
from contextlib import contextmanager
from typing import Any

from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.filesystem import DEFAULT_SUFFIX, FileSystem

from feedline.checkpoint._writers import (
    _DIRECT_PIECE,
    _O_DIRECT,
    WriterChoice,
    _pwrite_all,
    _write_error,
    choose_writer,
    open_direct,
    refused_direct,
)
from feedline.errors import ArgumentError, ConfigError, WriteError
from feedline.format._atomic import fsync_dir
from feedline.io._buffers import PAGE, aligned_empty

DCP_IO_CHOICES = ("auto", "buffered", "direct")


class DirectStream(_io.RawIOBase):
    """A write-only file whose bytes reach the disk with O_DIRECT (see the module docstring).

    ``write`` copies into an aligned buffer of ``piece`` bytes and writes each full
    buffer at once; ``close`` writes what is left (the aligned part direct, the last
    ``size % 4096`` bytes buffered), fsyncs (unless ``durable=False``) and closes. ``tell`` is the logical
    position (bytes written so far), as DCP records offsets with it.

    Args:
        fd: ``path`` already opened by :func:`~feedline.checkpoint._writers.open_direct`
            (``None``: open it here).

    Raises:
        WriteError: at open (also where the file system refuses O_DIRECT) or on any
            write/fsync failure (full disk, ...), naming the file.
    """

    def __init__(self, path: str, *, piece: int = _DIRECT_PIECE, durable: bool = True,
                 fd: int | None = None) -> None:
        super().__init__()
        self._path = path
        self._durable = durable
        if fd is None:
            fd = open_direct(path)
            if fd is None:
                raise WriteError(f"cannot write {path} with O_DIRECT: {refused_direct(path)}", path=path,
                                 fix="write buffered there (DCPWriter(io='auto') falls back by itself)")
        self._fd = fd
        self._mem = aligned_empty(piece)  # kept: owns the memory the view points into
        self._buf = self._mem.data.cast("B")
        self._fill = 0
        self._flushed = 0  # bytes already on disk (a multiple of PAGE)

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._flushed + self._fill

    def fileno(self) -> int:
        return self._fd

    def write(self, b: Any) -> int:
        view = memoryview(b).cast("B")
        n, done = len(view), 0
        cap = len(self._buf)
        while done < n:
            take = min(cap - self._fill, n - done)
            self._buf[self._fill : self._fill + take] = view[done : done + take]
            self._fill += take
            done += take
            if self._fill == cap:
                self._write_direct(cap)
        return n

    def _write_direct(self, nbytes: int) -> None:
        try:
            _pwrite_all(self._fd, self._buf[:nbytes], self._flushed)
        except OSError as e:
            raise _write_error(self._path, e) from e
        self._flushed += nbytes
        self._fill -= nbytes

    def close(self) -> None:
        if self.closed:
            return
        try:
            body = self._fill - self._fill % PAGE
            if body:
                self._write_direct(body)
            if self._fill:
                tail = self._buf[body : body + self._fill]
                self._write_tail(tail)
            if self._durable:
                os.fsync(self._fd)
        except OSError as e:
            raise _write_error(self._path, e) from e
        finally:
            os.close(self._fd)
            super().close()

    def _write_tail(self, tail: memoryview) -> None:
        fd = os.open(self._path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            _pwrite_all(fd, tail, self._flushed)
            if self._durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        self._flushed += len(tail)
        self._fill = 0


class FeedlineFileSystem(FileSystem):
    """DCP's local file system with direct data files (``direct``) and a durable rename (``durable``)."""

    def __init__(self, direct: bool, durable: bool = True) -> None:
        super().__init__()
        self.direct = direct
        self.durable = durable
        self.refused: str | None = None  # set when a data file's file system refused O_DIRECT (then buffered)

    @contextmanager
    def create_stream(self, path: str | os.PathLike[str], mode: str) -> Generator[Any, None, None]:
        fd = None
        if self.direct and mode == "wb" and os.fspath(path).endswith(DEFAULT_SUFFIX):
            fd = open_direct(os.fspath(path))
            if fd is None:  # as Checkpointer's DirectWriter does (before: WriteError "Invalid argument")
                self.refused = refused_direct(os.fspath(path))
        if fd is not None:
            direct = DirectStream(os.fspath(path), durable=self.durable, fd=fd)
            try:
                yield direct
            finally:
                direct.close()
        else:
            with super().create_stream(path, mode) as stream:
                yield stream

    def rename(self, path: str | os.PathLike[str], new_path: str | os.PathLike[str]) -> None:
        os.replace(path, new_path)
        if self.durable:
            fsync_dir(os.path.dirname(os.fspath(new_path)) or ".")


class DCPWriter(FileSystemWriter):
    """A ``dcp.save``/``dcp.async_save`` storage writer that writes with O_DIRECT.

    Args:
        path: the checkpoint directory (as DCP's ``checkpoint_id``).
        io: ``"auto"`` (direct where the directory accepts O_DIRECT, else buffered, with the
            reason in :attr:`choice`), ``"direct"`` or ``"buffered"``.
        durable: fsync every data file, the ``.metadata`` and the folder (default). ``False``
            skips them all (it sets DCP's ``sync_files=False``; passing that is the same):
            the ``.metadata`` rename still makes a checkpoint appear whole or not at all to
            a crash of the process, but a power cut or kernel crash may lose the newest
            checkpoint. Use it for frequent checkpoints that a later one supersedes (a
            rolling checkpoint every few minutes, where losing the last one to a power cut
            costs minutes) or on storage whose fsync is slow and not needed (tmpfs, a local
            scratch disk copied elsewhere afterwards); keep it for the checkpoints you
            resume from after a machine failure.
        **kwargs: passed on to ``FileSystemWriter`` (``thread_count``...).

    Use it as ``dcp.save(state, storage_writer=DCPWriter(path))``; with
    ``dcp.async_save(..., async_stager=CheckpointStager())`` the loop waits only for the
    staging copy and the direct writes happen in DCP's background thread. ``dcp.load``
    reads the result with its own reader.

    Raises:
        ConfigError: ``io`` is not one of :data:`DCP_IO_CHOICES`; ``durable`` and
            ``sync_files`` disagree.
        ArgumentError: ``durable`` is not a bool.
    """

    def __init__(self, path: str | os.PathLike[str], *, io: str = "auto", durable: bool = True,
                 **kwargs: Any) -> None:
        if io not in DCP_IO_CHOICES:
            fix = "DCP serialises from host memory: use io='direct'" if io == "gds" else "pass io='auto'"
            raise ConfigError(f"io must be one of {DCP_IO_CHOICES}, got {io!r}", fix=fix)
        if not isinstance(durable, bool):
            raise ArgumentError(f"durable must be True or False, got {durable!r}", field="durable")
        if "sync_files" in kwargs and bool(kwargs["sync_files"]) != durable:
            if durable is False:
                raise ConfigError("durable=False and sync_files=True disagree", field="durable",
                                  fix="pass only durable= (it sets sync_files)")
            durable = bool(kwargs["sync_files"])  # sync_files=False alone: DCP's spelling of durable=False
        kwargs["sync_files"] = durable
        super().__init__(path, **kwargs)
        self.io = io
        self.durable = durable
        self._use(os.fspath(path))

    def _use(self, path: str) -> None:
        self._choice = _choose(self.io, path)
        self._fs = FeedlineFileSystem(self._choice.name == "direct", self.durable)
        self.fs = self._fs

    @property
    def choice(self) -> WriterChoice:
        """The writes this checkpoint gets (``name``: direct or buffered) and why; ``buffered``,
        with the reason, once a data file's file system refused O_DIRECT."""
        refused = self._fs.refused
        if refused is None or self._choice.name != "direct":
            return self._choice
        return WriterChoice(self._choice.requested, "buffered", f"{self._choice.reason}; {refused}: buffered writes")

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        super().reset(checkpoint_id)
        if checkpoint_id:
            self._use(os.fspath(checkpoint_id))


def _choose(io: str, path: str) -> WriterChoice:
    """``choose_writer`` for a DCP directory that may not exist yet (probe its nearest parent)."""
    probe = path
    while probe and not os.path.isdir(probe):
        parent = os.path.dirname(probe.rstrip(os.sep))
        if parent == probe:
            break
        probe = parent
    choice = choose_writer(io, probe or ".", on_gpu=False)
    if choice.name == "direct" and not _O_DIRECT:
        return WriterChoice(io, "buffered", "this platform has no O_DIRECT")
    return choice


__all__ = ["DCP_IO_CHOICES", "DCPWriter", "DirectStream"]
