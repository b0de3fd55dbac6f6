"""Opening a packed dataset's metadata: manifest, shard sizes and indexes.

:func:`load_catalog` reads ``manifest.json`` and every shard index (local or
through fsspec), checks each shard's byte size against the manifest and each
index against its manifest size and checksum, then validates the index fully
(``ShardIndex.from_bytes``) before anything is allocated from it. The result,
a :class:`Catalog`, answers "where are the bytes of sample i" with numpy
lookups and no I/O.

A local index already validated in this process is shared, not read and parsed
again, while a catalog still holds it (a validation loader built per epoch, one
loader per fold, a batch-size finder): see :func:`_shard_index`.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from feedline.errors import FormatError
from feedline.format import (
    MANIFEST_NAME,
    FieldSchema,
    Manifest,
    ShardIndex,
    index_from_bytes,
    parse_manifest,
    read_manifest,
)
from feedline.format._files import read_regular
from feedline.format._manifest import source_keys
from feedline.format._schema import merge_schemas
from feedline.io._remote import remote_error

_FIX = "re-copy the dataset, or rebuild it with `feedline pack` / `feedline index`"


@dataclass
class ShardEntry:
    """One opened shard: where it lives and its validated index.

    ``first`` / ``end`` hold, per sample, the offset of its first payload byte
    and one past its last (samples are contiguous and in file order).
    """

    name: str
    path: str
    size: int
    index: ShardIndex
    first: np.ndarray
    end: np.ndarray
    stamp: tuple[int, ...] | None = None
    """Local shards: (device, inode) of the file when the dataset was opened; a file
    found with another later was replaced by another file (None: remote)."""


@dataclass
class Catalog:
    """Every shard of a dataset and the global sample order (shards in manifest order)."""

    manifest: Manifest
    shards: list[ShardEntry]
    starts: np.ndarray  # int64, len(shards) + 1: global index of each shard's first sample

    def __post_init__(self) -> None:
        self.first_of_shard: list[int] = self.starts.tolist()
        self.schema: dict[str, FieldSchema] = merge_schemas(
            ((s.index.schema, s.index.num_samples) for s in self.shards), self.manifest.fields
        )
        self._labels: dict[str, np.ndarray] = {}
        self._spans: dict[str, np.ndarray] = {}

    def label_column(self, name: str) -> np.ndarray:
        """int64 value of label field ``name`` for every sample in global order (built once)."""
        column = self._labels.get(name)
        if column is None:
            parts = [s.index.label_column(name) for s in self.shards if s.index.num_samples]
            column = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
            self._labels[name] = column  # a race only builds the same column twice
        return column

    def column(self, name: str) -> np.ndarray:
        """The values of column field ``name`` (:attr:`FieldSchema.column`: small raw / npy
        values kept in the index; or a label field) for every sample in global order, in
        the native byte order: ``(num_samples, *shape)``, what the field decodes to per
        sample stacked (built once: a copy of the index's bytes, 64 bytes a sample at most).

        Raises:
            KeyError: ``name`` is neither a column nor a label field of the dataset.
        """
        fs = self.schema.get(name)
        if fs is not None and fs.kind == "label":
            return self.label_column(name)
        if fs is None or not fs.column:
            raise KeyError(name)
        column = self._labels.get(name)
        if column is None:
            assert fs.dtype is not None and fs.shape is not None
            native = np.dtype(fs.dtype).newbyteorder("=")
            parts = [s.index.columns[name] for s in self.shards if s.index.num_samples]
            column = np.empty((self.num_samples, *fs.shape), dtype=native)
            if parts:
                np.concatenate(parts, out=column, casting="equiv")
            self._labels[name] = column  # a race only builds the same column twice
        return column

    def member_spans(self, name: str) -> np.ndarray:
        """``(offset, size)`` of field ``name``'s member for every sample in global order: an
        int64 ``(num_samples, 2)`` array (size ``-1`` where a sample lacks the field; built
        once, 16 bytes a sample). A batch's members are then one gather and one ``tolist``,
        not a numpy pass per shard or per column (each numpy call after a decode runs with
        cold caches: see :func:`feedline.io._columns.read_members`)."""
        spans = self._spans.get(name)
        if spans is None:
            parts = [np.zeros((0, 2), dtype=np.int64)]
            for shard in self.shards:
                rows, members = shard.index.field_rows(name), shard.index.members
                has = rows >= 0
                part = np.zeros((len(rows), 2), dtype=np.int64)
                part[:, 1] = -1
                if len(members):
                    at = rows[has]
                    part[has, 0] = members["offset"][at]
                    part[has, 1] = members["size"][at]
                parts.append(part)
            spans = self._spans[name] = np.concatenate(parts)
        return spans  # a race only builds the same array twice

    @property
    def num_samples(self) -> int:
        """Samples in the whole dataset."""
        return int(self.starts[-1])

    def locate(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(shard position, sample within shard)`` for global ``indices`` (already range-checked)."""
        pos = np.searchsorted(self.starts, indices, side="right") - 1
        return pos, indices - self.starts[pos]


class _Storage:
    """Just enough of a file system for opening: whole-file bytes and sizes."""

    def __init__(self, root: str, fs: Any | None) -> None:
        self.root = root
        self.fs = fs

    def join(self, name: str) -> str:
        return f"{self.root}/{name}" if self.fs is not None else os.path.join(self.root, name)

    def size(self, path: str, shard: str) -> tuple[int, tuple[int, ...] | None]:
        """The file's size and (local files) its :attr:`ShardEntry.stamp`."""
        t0 = time.monotonic()
        try:
            if self.fs is not None:
                return int(self.fs.size(path)), None
            st = os.stat(path)
            return st.st_size, file_stamp(st)
        except (OSError, ValueError) as e:
            if self.fs is not None and not isinstance(e, FileNotFoundError):
                raise remote_error(e, "asking the shard's size", path, fs=self.fs, since=t0) from e
            raise FormatError(f"shard file is missing or unreadable: {e}", shard=shard, path=path, fix=_FIX) from e
        except Exception as e:  # a remote client's own exception type
            raise remote_error(e, "asking the shard's size", path, fs=self.fs, since=t0) from e

    def read(self, path: str, shard: str, limit: int) -> bytes:
        """At most ``limit`` bytes of ``path``: a longer file (or a device) is never read whole."""
        t0 = time.monotonic()
        try:
            if self.fs is not None:
                return bytes(self.fs.cat_file(path, start=0, end=limit))
            return read_regular(path, limit)
        except (OSError, ValueError) as e:
            if self.fs is not None and not isinstance(e, FileNotFoundError):
                raise remote_error(e, "reading the index", path, fs=self.fs, since=t0) from e
            raise FormatError(f"index file is missing or unreadable: {e}", shard=shard, path=path, fix=_FIX) from e
        except Exception as e:
            raise remote_error(e, "reading the index", path, fs=self.fs, since=t0) from e

    def manifest(self) -> Manifest:
        if self.fs is None:
            return read_manifest(self.root)
        path = self.join(MANIFEST_NAME)
        t0 = time.monotonic()
        try:
            data = bytes(self.fs.cat_file(path))
        except FileNotFoundError:
            raise FormatError(
                "no manifest: this prefix holds no complete feedline dataset",
                path=path,
                fix="upload a packed dataset (manifest.json last)",
            ) from None
        except Exception as e:  # OSError, or a remote client's own type (connection, checksum)
            raise remote_error(e, "reading the manifest", path, fs=self.fs, since=t0) from e
        return parse_manifest(data, path)


def file_stamp(st: os.stat_result) -> tuple[int, ...]:
    """Which file this is: device and inode (a replacement by rename or copy-and-move
    changes them; an edit in place does not, and is left to the checksums)."""
    return (st.st_dev, st.st_ino)


def _extents(index: ShardIndex) -> tuple[np.ndarray, np.ndarray]:
    starts = index.sample_start
    if index.num_samples == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    members = index.members
    first = members["offset"][starts[:-1]].astype(np.int64)
    last = starts[1:] - 1
    end = (members["offset"][last] + members["size"][last]).astype(np.int64)
    return first, end


def _open_shard(storage: _Storage, manifest: Manifest, i: int) -> ShardEntry:
    info = manifest.shards[i]
    path = storage.join(info.name)
    size, stamp = storage.size(path, info.name)
    if size != info.size:
        what = "truncated" if size < info.size else "longer than recorded (trailing bytes)"
        raise FormatError(
            f"shard is {size} bytes but the manifest records {info.size}: it is {what}",
            shard=info.name,
            path=path,
            fix=_FIX,
        )
    index = _shard_index(storage, manifest, info, size)
    first, end = _extents(index)
    return ShardEntry(info.name, path, size, index, first, end, stamp)


# Indexes validated in this process, by the identity of their file and what they were
# checked against; held weakly: an index lives only as long as a catalog uses it.
_PARSED: weakref.WeakValueDictionary[tuple[Any, ...], ShardIndex] = weakref.WeakValueDictionary()
_PARSED_LOCK = threading.Lock()
RACY_NS = 2_000_000_000
"""An index file changed less than this long ago is never shared: file times tick
coarsely (a few ms), so a rewrite in the same tick as the parse would keep its
ctime (git's "racy clean" rule)."""


def _index_identity(storage: _Storage, path: str, info: Any, size: int,
                    manifest: Manifest) -> tuple[Any, ...] | None:
    """What makes a parsed index reusable: the same local file (device, inode, size,
    mtime, ctime: a rewrite or replacement changes them), the same manifest record and
    shard size it was validated against. None: remote, unreadable or recently changed."""
    if storage.fs is not None:
        return None
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None  # the read below raises the error with its place
    if time.time_ns() - st.st_ctime_ns < RACY_NS:
        return None
    return (os.path.abspath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
            st.st_ctime_ns, info, size, manifest.checksum_algo, manifest.key_escape)


def _shard_index(storage: _Storage, manifest: Manifest, info: Any, size: int) -> ShardIndex:
    """The shard's validated index; parsed once per process while a catalog holds it.

    Opening the same dataset again (a second loader) costs a ``stat`` per shard
    instead of reading, checksumming and validating every index (~0.25 ms a shard)."""
    path = storage.join(info.index)
    identity = _index_identity(storage, path, info, size, manifest)
    if identity is not None:
        with _PARSED_LOCK:
            index = _PARSED.get(identity)
        if index is not None:
            return index
    # one byte more than the manifest's size: a longer index is refused by its size check
    data = storage.read(path, info.name, info.index_size + 1)
    index = index_from_bytes(info, data, shard_size=size, checksum_algo=manifest.checksum_algo)
    index.keys = source_keys(manifest.key_escape, index.keys)  # what the user named their files: frame.000123, not frame%2E000123
    if identity is not None:
        with _PARSED_LOCK:
            _PARSED[identity] = index
    return index


def load_catalog(root: str, fs: Any | None = None, manifest: Manifest | None = None) -> Catalog:
    """Read and validate a dataset's manifest and every shard index.

    Args:
        root: dataset folder (local) or object-store prefix path (with ``fs``).
        fs: an fsspec file system for remote datasets, ``None`` for local ones.
        manifest: the manifest already read (by the process a worker's copy came
            from): ``manifest.json`` is not read again, so a re-index that removes
            and rewrites it cannot fail the copy; the indexes are still checked
            against its checksums and the shards against its sizes.

    Raises:
        FormatError: missing/invalid manifest or index, or a shard whose size
            differs from the manifest (truncated, trailing bytes).
        ChecksumError: an index file whose checksum differs from the manifest.
    """
    storage = _Storage(root, fs)
    if manifest is None:
        manifest = storage.manifest()
    shards = [_open_shard(storage, manifest, i) for i in range(len(manifest.shards))]
    starts = np.zeros(len(shards) + 1, dtype=np.int64)
    np.cumsum([s.index.num_samples for s in shards], out=starts[1:])
    return Catalog(manifest, shards, starts)
