"""ShardWriter: write one tar shard and its index, atomically.

Both files are written under hidden temp names in the target folder and
renamed into place only by :meth:`ShardWriter.close` after an fsync, so a
shard under its final name is always complete. An exception inside the
``with`` block removes the temp files.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple

import numpy as np

from feedline.errors import ConfigError, ReadError
from feedline.format._atomic import fsync_dir, remove_quietly, start_writeback, temp_name
from feedline.format._checksum import check_algo, checksum, checksum_function, hasher, hexdigest
from feedline.format._files import CHANGED_FIX, NOFOLLOW, open_fd, source_error
from feedline.format._index import MEMBER_DTYPE, ShardIndex, encode_index
from feedline.format._manifest import ShardInfo
from feedline.format._schema import HEAD_BYTES, SchemaBuilder, candidate_kind
from feedline.format._tar import BLOCK, END_OF_ARCHIVE, check_member_name, member_header

INDEX_SUFFIX = ".idx"
_WRITE_BUFFER = 1 << 20
_MAX_IOV = 512  # pieces per writev, below IOV_MAX (1024 on Linux)
_WRITEBACK_EVERY = 8 << 20  # start disk writeback of each 8 MiB written, so close()'s fsync is short
_ZEROS = bytes(BLOCK)
_ZERO_VIEW = memoryview(_ZEROS)
_MAX_FIELDS = 1 << 16  # field ids are '<u2' in the index
_STREAM_CHUNK = 4 << 20  # bytes read and written at a time for a streamed file


class FilePayload(NamedTuple):
    """A member whose payload is copied from the file ``path`` while it is written:
    read in 4 MiB chunks into one reused buffer and checksummed on the way, so
    the writer's memory does not grow with the file. ``size`` is the size
    planned (and written in the tar header); a file that changed size by the
    time it is copied is an error that aborts the shard.
    """

    path: str
    size: int
    nofollow: bool = False  # refuse a symbolic link at path (the listing found a file)


Payload = bytes | memoryview | FilePayload


MAX_ALIGN = 16 << 20  # each sample may be padded by up to this much: larger is a typo


def check_align(align: object) -> int:
    """``align`` must be 0 (off) or a positive multiple of 512, at most 16 MiB."""
    if (isinstance(align, bool) or not isinstance(align, int) or align < 0 or align % 512
            or align > MAX_ALIGN):
        raise ConfigError(
            f"align: must be 0 or a positive multiple of 512 bytes up to {MAX_ALIGN}, got {align!r}",
            field="align", fix="use --align 4096 for O_DIRECT / GPUDirect Storage, or 0",
        )
    return align


class ShardWriter:
    """Context manager writing one shard (``path``) and its index (``path + ".idx"``).

    Args:
        path: final path of the shard, e.g. ``out/shard-000000.tar``.
        align: 0, or the boundary (a multiple of 512) each sample's first
            payload byte is padded to.
        checksum_algo: ``"xxh3"`` (default) or ``"crc32c"``.
        durable: fsync the shard, the index and the folder before :meth:`close`
            returns (default). False keeps the temp-and-rename atomicity, so a
            killed process leaves nothing partial, but a power loss may.

    Samples are written in call order; fields of a sample in the order given.
    """

    def __init__(self, path: str | os.PathLike[str], *, align: int = 0, checksum_algo: str = "xxh3",
                 durable: bool = True) -> None:
        self.path = Path(path)
        self.durable = durable
        self.index_path = self.path.with_name(self.path.name + INDEX_SUFFIX)
        self.align = check_align(align)
        self.checksum_algo = check_algo(checksum_algo)
        self._checksum = checksum_function(checksum_algo)
        self._hasher = hasher(checksum_algo)
        self._temp = temp_name(self.path)
        self._fd: int | None = os.open(self._temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self._pending: list[bytes | memoryview] = []
        self._pending_bytes = 0
        self._pos = 0
        self._flushed = 0  # bytes handed to the kernel
        self._written_back = 0  # bytes whose disk writeback was started
        self._keys: list[str] = []
        self._key_set: set[str] = set()
        self._field_ids: dict[str, int] = {}
        self._records: list[tuple[int, int, int, int, int]] = []
        self._schema = SchemaBuilder()
        self._chunk: bytearray | None = None
        self.index: ShardIndex | None = None
        self.info: ShardInfo | None = None

    @property
    def position(self) -> int:
        """Bytes written so far (the offset where the next header starts)."""
        return self._pos

    @property
    def num_samples(self) -> int:
        """Samples written so far."""
        return len(self._keys)

    def _write(self, data: bytes | memoryview) -> None:
        # gathered and written with one writev per ~1 MiB: no copies, few syscalls
        self._hasher.update(data)
        self._pos += len(data)
        self._pending.append(data)
        self._pending_bytes += len(data)
        if self._pending_bytes >= _WRITE_BUFFER or len(self._pending) >= _MAX_IOV:
            self._flush()

    def _flush(self) -> None:
        if self._fd is None:
            raise ValueError("write on a closed ShardWriter")
        pending = self._pending
        for lo in range(0, len(pending), _MAX_IOV):
            batch = pending if len(pending) <= _MAX_IOV else pending[lo : lo + _MAX_IOV]
            written = os.writev(self._fd, batch)
            want = self._pending_bytes if batch is pending else sum(len(b) for b in batch)
            if written < want:  # a short write (rare): finish it
                rest = memoryview(b"".join(batch))[written:]
                while rest:
                    rest = rest[os.write(self._fd, rest) :]
        self._pending.clear()
        self._handed(self._pending_bytes)
        self._pending_bytes = 0

    def _handed(self, nbytes: int) -> None:
        """Count ``nbytes`` handed to the kernel; start disk writeback every 8 MiB."""
        self._flushed += nbytes
        if self.durable and self._fd is not None and self._flushed - self._written_back >= _WRITEBACK_EVERY:
            start_writeback(self._fd, self._written_back, self._flushed - self._written_back)
            self._written_back = self._flushed

    def write_sample(
        self,
        key: str,
        fields: Mapping[str, Payload] | Iterable[tuple[str, Payload]],
        checksums: Sequence[int | None] | None = None,
    ) -> None:
        """Append one sample: its fields become members ``key.field`` in order.

        Args:
            key: the sample key (a relative path without dots in its last part).
            fields: field name -> payload, or (name, payload) pairs; a payload
                is bytes-like or a :class:`FilePayload` streamed from its file.
            checksums: the payload checksums if already computed (same order;
                None entries, and streamed files, are computed here).

        Raises:
            ConfigError: bad key or field name, or an empty sample.
            ReadError: a streamed file that cannot be opened (before any byte
                of the sample is written), or that cannot be read or changed
                size while copied (the shard is then unusable: leave the
                ``with`` block with the error).
        """
        if self._fd is None:
            raise ValueError("write_sample on a closed ShardWriter")
        items = list(fields.items()) if isinstance(fields, Mapping) else list(fields)
        names = self._check_sample(key, [field for field, _ in items])
        if checksums is not None and len(checksums) != len(items):
            raise ValueError(f"checksums: {len(checksums)} values for {len(items)} fields")
        if any(isinstance(data, FilePayload) for _, data in items):
            self._write_streamed(key, names, items)
            return
        facts = [self._fact(key, field, data) for field, data in items]  # type: ignore[arg-type]
        sample = len(self._keys)
        self._keys.append(key)
        self._key_set.add(key)
        pending, update = self._pending, self._hasher.update
        records, field_ids, pos, start = self._records, self._field_ids, self._pos, self._pos
        for n, (field, data) in enumerate(items):
            if isinstance(data, memoryview) and data.itemsize != 1:
                data = data.cast("B")  # bytes, not elements (C-contiguous views only)
            assert not isinstance(data, FilePayload)
            size = len(data)
            header = member_header(names[n], size, pos, self.align if n == 0 else 0)
            pad = _ZERO_VIEW[: -size % BLOCK]
            fid = field_ids.setdefault(field, len(field_ids))
            given = checksums[n] if checksums is not None else None
            value = given if given is not None else self._checksum(data)
            records.append((sample, fid, pos + len(header), size, value))
            self._schema.commit(fid, field, facts[n])
            update(header)
            update(data)
            update(pad)
            pending += (header, data, pad)
            pos += len(header) + size + len(pad)
        self._pos = pos
        self._pending_bytes += pos - start
        if self._pending_bytes >= _WRITE_BUFFER or len(pending) >= _MAX_IOV:
            self._flush()

    def _write_streamed(self, key: str, names: list[str], items: list[tuple[str, Payload]]) -> None:
        """write_sample for a sample with streamed files: each file is opened and
        its first bytes checked (schema fact) before any byte of the sample is written."""
        fds: list[int | None] = []
        try:
            facts = []
            for field, data in items:
                if isinstance(data, FilePayload):
                    opened = self._open_source(key, field, data.path, data.nofollow)
                    fds.append(opened)
                    head = os.pread(opened, min(HEAD_BYTES, data.size), 0)
                    facts.append(self._fact_of(key, field, memoryview(head), data.size))
                else:
                    fds.append(None)
                    facts.append(self._fact(key, field, data))
            self._keys.append(key)
            self._key_set.add(key)
            sample = len(self._keys) - 1
            for n, (field, data) in enumerate(items):
                fid = self._field_ids.setdefault(field, len(self._field_ids))
                self._schema.commit(fid, field, facts[n])
                fd = fds[n]
                if fd is None:
                    assert not isinstance(data, FilePayload)
                    view = memoryview(data).cast("B") if isinstance(data, memoryview) else memoryview(data)
                    size, value = view.nbytes, self._checksum(view)
                    self._write(member_header(names[n], size, self._pos, self.align if n == 0 else 0))
                    start = self._pos
                    self._write(view)
                else:
                    assert isinstance(data, FilePayload)
                    size = data.size
                    self._write(member_header(names[n], size, self._pos, self.align if n == 0 else 0))
                    start = self._pos
                    value = self._copy_file(key, field, data, fd)
                self._write(_ZERO_VIEW[: -size % BLOCK])
                self._records.append((sample, fid, start, size, value))
        finally:
            for each in fds:
                if each is not None:
                    os.close(each)

    @staticmethod
    def _open_source(key: str, field: str, path: str, nofollow: bool = False) -> int:
        try:  # still a regular file: a FIFO put in its place would block forever
            return open_fd(path, NOFOLLOW if nofollow else 0)
        except OSError as e:
            raise source_error(e, path, key=key, field=field) from None

    def _copy_file(self, key: str, field: str, src: FilePayload, fd: int) -> int:
        """Copy ``src`` into the shard in chunks through one reused buffer; its checksum."""
        self._flush()
        if self._chunk is None:
            self._chunk = bytearray(_STREAM_CHUNK)
        buf = memoryview(self._chunk)
        member = hasher(self.checksum_algo)
        left = src.size
        try:
            while left > 0:
                got = os.readv(fd, [buf[: min(left, _STREAM_CHUNK)]])
                if got == 0:
                    break
                piece = buf[:got]
                member.update(piece)
                self._hasher.update(piece)
                self._write_all(piece)
                self._handed(got)
                left -= got
            extra = os.read(fd, 1) if left == 0 else b""
        except OSError as e:
            raise source_error(e, src.path, key=key, field=field) from None
        if left or extra:
            raise ReadError(
                f"{src.path!r} changed size while it was packed (planned {src.size} bytes)",
                key=key, field=field, path=src.path, fix=CHANGED_FIX,
            )
        self._pos += src.size
        return member.intdigest()

    def _write_all(self, piece: memoryview) -> None:
        if self._fd is None:
            raise ValueError("write on a closed ShardWriter")
        while piece:
            piece = piece[os.write(self._fd, piece) :]

    def _fact(self, key: str, field: str, data: bytes | memoryview) -> tuple[Any, ...]:
        view = memoryview(data)
        if view.itemsize != 1:
            view = view.cast("B")
        return self._fact_of(key, field, view[:HEAD_BYTES], view.nbytes)

    @staticmethod
    def _fact_of(key: str, field: str, head: memoryview, size: int) -> tuple[Any, ...]:
        """The schema fact of one member (npy header, label value) from its first
        bytes ``head`` and ``size``; refuses bad ones.

        Raises:
            ConfigError: an ``.npy`` needing pickle or unreadable, or a ``cls`` label
                that is not an integer (naming the member ``key.field``).
        """
        if candidate_kind(field) == "var":
            return 0, None  # nothing to learn from the bytes (most fields: images, json...)
        try:
            return SchemaBuilder.check(field, head, size)
        except ConfigError as exc:
            raise ConfigError(f"{key}.{field}: {exc.message}", key=key, field=field, fix=exc.fix) from None

    def _check_sample(self, key: str, fields: list[str]) -> list[str]:
        """Validate a whole sample before any byte of it is written; its member names."""
        if not fields:
            raise ConfigError(f"sample {key!r} has no fields", key=key, fix="give every sample at least one file")
        if key in self._key_set:
            raise ConfigError(f"sample key {key!r} written twice", key=key, fix="keys must be unique in a shard")
        if len(fields) > 1 and len(set(fields)) != len(fields):
            raise ConfigError(f"sample {key!r} repeats a field", key=key, fix="give each field once")
        known = self._field_ids
        if not all(f in known for f in fields):
            new = {f for f in fields if f not in known}
            if len(known) + len(new) > _MAX_FIELDS:
                raise ConfigError(f"more than {_MAX_FIELDS} distinct fields in one shard", key=key)
        return [check_member_name(key, field) for field in fields]

    def close(self) -> ShardInfo:
        """Finish the archive, fsync, write the index, rename both into place.

        Returns the :class:`ShardInfo` (names relative to the shard's folder).
        On any failure the temp files are removed and the error propagates.
        """
        if self.info is not None:
            return self.info
        index_temp = temp_name(self.index_path)
        try:
            shard_sum = self._finish_tar()
            members = np.array(self._records, dtype=MEMBER_DTYPE) if self._records else np.zeros(0, MEMBER_DTYPE)
            field_records, aux, columns = self._schema.finish(list(self._field_ids), len(self._keys),
                                                              members["field"])
            data = encode_index(
                self._keys,
                list(self._field_ids),
                members,
                field_records=field_records,
                aux=aux,
                columns=columns,
                shard_size=self._pos,
                shard_checksum=shard_sum,
                checksum_algo=self.checksum_algo,
                align=self.align,
            )
            self.index = ShardIndex.from_bytes(data, shard_size=self._pos, shard=self.path.name)
            with open(index_temp, "wb") as f:
                f.write(data)
                if self.durable:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(self._temp, self.path)
            os.replace(index_temp, self.index_path)
            if self.durable:
                fsync_dir(self.path.parent)
        except BaseException:
            self.abort()
            remove_quietly(index_temp)
            raise
        self.info = ShardInfo(
            name=self.path.name,
            index=self.index_path.name,
            size=self._pos,
            index_size=len(data),
            num_samples=len(self._keys),
            checksum=hexdigest(shard_sum),
            index_checksum=hexdigest(checksum(data, self.checksum_algo)),
        )
        return self.info

    def _finish_tar(self) -> int:
        """Write the end-of-archive blocks, fsync and close the tar; its checksum."""
        self._write(END_OF_ARCHIVE)
        self._flush()
        fd, self._fd = self._fd, None
        if fd is None:
            raise ValueError("close on an aborted ShardWriter")
        try:
            if self.durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        return self._hasher.intdigest()

    def abort(self) -> None:
        """Drop everything written: close and remove the temp file."""
        fd, self._fd = self._fd, None
        self._pending.clear()
        if fd is not None:
            os.close(fd)
        remove_quietly(self._temp)

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
