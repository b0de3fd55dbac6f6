"""``open_dataset``: random and batched access to a packed dataset.

A :class:`PackedDataset` maps a global sample index to the bytes of its
fields. Batched reads go through the read planner: the batch's samples are
grouped by shard, neighbouring extents are coalesced into aligned windows,
each window is read with one request into a pooled buffer, and every field is
handed back as a zero-copy view into that buffer.
"""

from __future__ import annotations

import bisect
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from feedline.errors import ArgumentError, ConfigError, FormatError, SampleIndexError
from feedline.format import FieldSchema, Manifest, read_manifest
from feedline.format._files import path_argument
from feedline.io._catalog import Catalog, file_stamp, load_catalog
from feedline.io._columns import Views, gather_columns, gather_labels, read_columns, read_members
from feedline.io._handles import HandleBudget, ShardReadState
from feedline.io._ranges import read_ranges
from feedline.io._remote import RemoteReader, is_remote, normalise_root, open_filesystem
from feedline.io._subset import PackedSubset, all_columns, all_labels
from feedline.io._window import ShardJob, read_jobs
from feedline.io.backends import BackendChoice, Reader, choose_backend, make_reader
from feedline.io.planner import DEFAULT_MAX_GAP, DEFAULT_MAX_WINDOW, Window, coalesce

Sample = dict[str, Any]


class _Opened:
    """Everything a dataset builds at open; rebuilt after unpickling or fork."""

    def __init__(self, catalog: Catalog, reader: Reader, choice: BackendChoice) -> None:
        from feedline.io._buffers import HostBufferPool

        self.pid = os.getpid()
        self.catalog = catalog
        self.reader = reader
        self.choice = choice
        self.pool = HostBufferPool()
        self.handles = HandleBudget(reader)
        self.states = [ShardReadState(s, self.handles) for s in catalog.shards]
        self.lock = threading.Lock()

    def close(self) -> None:
        for state in self.states:
            state.close()
        self.pool.clear()


class PackedDataset:
    """A packed dataset opened for reading (use :func:`open_dataset`).

    Thread-safe: any number of threads may call :meth:`read_many` at once.
    Picklable: pickling keeps the root and options; the copy reopens lazily on
    first use (process workers rely on this; a forked child also reopens).

    Memory: a batch's windows are read into arena buffers of up to 32 MiB
    from a small per-dataset pool (at most 8 cached). Returned views point
    into those buffers, which are not reused while any view of them is alive:
    copy or decode the bytes and drop the views to let buffers recycle.

    Open files: a shard's file is opened at its first read and kept open, but at
    most a quarter of the open-file limit (``ulimit -n``, up to 1,024) at once; past
    that the least recently used idle one is closed (:mod:`feedline.io._handles`).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        io: str = "auto",
        verify: bool = False,
        storage_options: dict[str, Any] | None = None,
        max_window: int = DEFAULT_MAX_WINDOW,
        max_gap: int = DEFAULT_MAX_GAP,
    ) -> None:
        self._root = normalise_root(path_argument(root, "root"))
        self._io = io
        if not isinstance(verify, (bool, np.bool_)):
            raise ArgumentError(f"verify must be True or False, got {verify!r}", field="verify")
        self._verify = bool(verify)
        if storage_options is not None and not isinstance(storage_options, Mapping):
            raise ArgumentError(f"storage_options must be a dict of fsspec options, got {storage_options!r}",
                                field="storage_options")
        self._storage_options = dict(storage_options or {})
        self._max_window = max_window
        self._max_gap = max_gap
        self._check_options()
        self._opened: _Opened | None = None
        self._open_lock = threading.Lock()
        self._expect: dict[str, Any] | None = None  # a pickled copy: what the original opened

    def _check_options(self) -> None:
        choice_ok = ("auto", "buffered", "direct", "gds")
        if self._io not in choice_ok:
            raise ConfigError(f"io must be one of {choice_ok}, got {self._io!r}")
        if is_remote(self._root) and self._io not in ("auto", "buffered"):
            raise ConfigError(
                f"io={self._io!r} needs a local dataset; {self._root!r} is remote",
                fix="use io='auto' for object stores",
            )
        for name in ("max_window", "max_gap"):
            value = getattr(self, f"_{name}")
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
                raise ArgumentError(f"{name} must be an int number of bytes, got {value!r}", field=name)
        if self._max_window < 4096 or self._max_window % 4096 or self._max_window > 1 << 40:
            raise ConfigError(f"max_window must be a positive multiple of 4096, got {self._max_window}",
                              field="max_window")
        if self._max_gap < 0:
            raise ConfigError(f"max_gap must be >= 0, got {self._max_gap}", field="max_gap")

    # -- opening -----------------------------------------------------------------
    def _open(self) -> _Opened:
        if is_remote(self._root):
            fs, path = open_filesystem(self._root, self._storage_options)
            catalog = load_catalog(path, fs)
            choice = BackendChoice(self._io, "remote", "remote dataset: ranged reads through fsspec")
            return _Opened(catalog, RemoteReader(fs), choice)
        expect = self._expect
        if expect is None:
            catalog = load_catalog(self._root)
        else:  # a copy: the manifest its original read, so a re-index's rewrite cannot fail it
            try:
                catalog = load_catalog(self._root, manifest=expect["manifest"])
            except FormatError:  # an index that is not the original's: say why, if the folder changed
                self._check_same({n: self._stamp_now(n) for n in expect["stamps"]})
                if not self._same_manifest(expect["manifest"]):
                    raise FormatError(
                        "the dataset changed on disk after it was opened (its manifest and indexes were "
                        "rewritten: re-indexed or re-packed)", path=self._root,
                        fix="finish indexing or packing before training starts, then open it again "
                            "(a new Loader)") from None
                raise
            self._check_same({s.name: s.stamp for s in catalog.shards})
        choice = choose_backend(self._io)
        return _Opened(catalog, make_reader(choice.name), choice)

    def _same_manifest(self, manifest: Manifest) -> bool:
        try:
            return read_manifest(self._root) == manifest
        except FormatError:
            return False

    def _stamp_now(self, shard: str) -> tuple[int, ...] | None:
        try:
            return file_stamp(os.stat(os.path.join(self._root, shard)))
        except OSError:
            return None

    def _check_same(self, now: dict[str, tuple[int, ...] | None]) -> None:
        """A copy (a process worker's) must open the files the original opened: ``now``
        holds each shard's stamp as the copy finds it (None: gone).

        Raises:
            FormatError: a shard file was replaced by another (or removed) since the
                original opened the dataset: the worker would read other samples than the
                training process planned (another count, other bytes at the same index).
        """
        expect = self._expect
        if expect is None or now == expect["stamps"]:
            return
        changed = sorted(n for n in set(now) | set(expect["stamps"]) if now.get(n) != expect["stamps"].get(n))
        raise FormatError(
            f"the dataset changed on disk after it was opened (shards replaced by other files: "
            f"{', '.join(changed[:5])})", path=self._root, shard=changed[0],
            fix="finish copying or packing before training starts, then open it again (a new Loader)")

    def _state(self) -> _Opened:
        opened = self._opened
        if opened is not None and opened.pid == os.getpid():
            return opened
        with self._open_lock:
            if self._opened is None or self._opened.pid != os.getpid():
                if self._opened is not None:  # a forked child: the files must be the parent's
                    self._expect = self._expectation(self._opened)
                self._opened = self._open()  # a forked child never reuses the parent's handles
            return self._opened

    def _expectation(self, opened: _Opened | None) -> dict[str, Any] | None:
        """What a copy must find when it reopens: the manifest's shards and each file's stamp."""
        if opened is None or is_remote(self._root):
            return self._expect
        return {"manifest": opened.catalog.manifest,
                "stamps": {s.name: s.stamp for s in opened.catalog.shards}}

    def __getstate__(self) -> dict[str, Any]:
        opened = self._opened
        expect = self._expectation(opened) if opened is not None and opened.pid == os.getpid() else self._expect
        return {
            "expect": expect,
            "root": self._root,
            "io": self._io,
            "verify": self._verify,
            "storage_options": self._storage_options,
            "max_window": self._max_window,
            "max_gap": self._max_gap,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["root"],
            io=state["io"],
            verify=state["verify"],
            storage_options=state["storage_options"],
            max_window=state["max_window"],
            max_gap=state["max_gap"],
        )
        self._expect = state.get("expect")

    # -- metadata ----------------------------------------------------------------
    def __len__(self) -> int:
        return self._state().catalog.num_samples

    def keys(self) -> list[str]:
        """Sample keys in global order (shards in manifest order)."""
        return [k for shard in self._state().catalog.shards for k in shard.index.keys]

    @property
    def fields(self) -> list[str]:
        """Field names of the dataset (the manifest's schema), sorted."""
        return sorted(self._state().catalog.manifest.fields)

    @property
    def classes(self) -> tuple[str, ...] | None:
        """The class names, label ``i`` = ``classes[i]``, as torchvision's ``ImageFolder.classes``
        (what ``pack --labels`` stored in the manifest); None for a dataset packed without."""
        return self._state().catalog.manifest.classes

    @property
    def class_to_idx(self) -> dict[str, int]:
        """``{class name: label}``, as torchvision's ``ImageFolder.class_to_idx``; empty without
        :attr:`classes`."""
        return {c: i for i, c in enumerate(self.classes or ())}

    @property
    def schema(self) -> Mapping[str, FieldSchema]:
        """Field name -> :class:`~feedline.format.FieldSchema` for the whole dataset (read-only).

        A field is ``raw``, ``npy`` or ``label`` only if it is so in every shard and
        every sample, with one dtype and shape; otherwise ``var``. Raw and npy fields
        can be read straight into batch rows (:meth:`read_fields_into`), label fields
        and raw / npy fields with ``column=True`` (at most 64 bytes a sample, format
        version 3) gathered from the index (:meth:`gather_columns`). A dataset written before
        format version 2 has raw fields of one size as ``raw`` and every other field
        as ``var``: rebuild its indexes (``feedline index``, or repack) to get the rest.
        """
        return MappingProxyType(self._state().catalog.schema)

    @property
    def root(self) -> str:
        """The dataset root (folder or URL) as given."""
        return self._root

    @property
    def backend(self) -> BackendChoice:
        """The backend in use and why (``auto`` explains its choice here)."""
        return self._state().choice

    @property
    def fingerprint(self) -> str:
        """A stable string identifying the dataset's contents (from manifest checksums)."""
        import hashlib

        manifest = self._state().catalog.manifest
        h = hashlib.sha256(f"v{manifest.version}:{manifest.checksum_algo}".encode())
        for s in manifest.shards:
            h.update(f"|{s.name}:{s.size}:{s.num_samples}:{s.checksum}:{s.index_checksum}".encode())
        return f"feedline-{h.hexdigest()[:32]}"

    def locate(self, i: int) -> tuple[str, str]:
        """``(shard name, sample key)`` of global sample ``i`` (cheap: no I/O, no numpy)."""
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise ArgumentError(f"sample index must be an int, got {type(i).__name__}", field="index")
        catalog = self._state().catalog
        n = catalog.num_samples
        j = int(i) + n if i < 0 else int(i)
        if not 0 <= j < n:
            raise SampleIndexError(f"sample index {int(i)} out of range for a dataset of {n} samples")
        pos = bisect.bisect_right(catalog.first_of_shard, j) - 1
        shard = catalog.shards[pos]
        return shard.name, shard.index.keys[j - catalog.first_of_shard[pos]]

    # -- reading -----------------------------------------------------------------
    @staticmethod
    def _indices(indices: Iterable[int], n: int) -> np.ndarray:
        # a loader's own indices (a list of ints, or int64): only the range is checked here
        # (np.issubdtype and the conversions cost a read of 16 JPEGs ~4 us a sample, measured)
        if type(indices) is list and all(type(i) is int for i in indices):
            if not indices or (min(indices) >= 0 and max(indices) < n):
                return np.array(indices, dtype=np.int64)
        elif (type(indices) is np.ndarray and indices.dtype == np.int64 and indices.ndim == 1
              and (not indices.size or (indices.min() >= 0 and indices.max() < n))):
            return indices
        if isinstance(indices, (str, bytes, bytearray)) or not hasattr(indices, "__iter__"):
            raise ArgumentError(f"indices must be a sequence of ints, got {type(indices).__name__}",
                                field="indices")
        try:
            idx = np.asarray(list(indices) if not isinstance(indices, np.ndarray) else indices)
        except (ValueError, OverflowError) as e:  # ragged nesting
            raise ArgumentError(f"indices must be a flat sequence of ints: {e}", field="indices") from None
        if idx.size and (not np.issubdtype(idx.dtype, np.integer) or idx.ndim != 1):
            raise ArgumentError(f"indices must be a flat sequence of ints, got dtype {idx.dtype} "
                                f"and shape {idx.shape}", field="indices")
        if idx.size and idx.dtype == np.uint64 and int(idx.max()) >= n:
            raise SampleIndexError(f"sample index {int(idx.max())} out of range for a dataset of {n} samples")
        idx = idx.astype(np.int64, copy=False).reshape(-1)
        if not idx.size or (idx.min() >= 0 and idx.max() < n):
            return idx  # the common case: no negative index to wrap
        bad = (idx < -n) | (idx >= n)
        if bad.any():
            raise SampleIndexError(f"sample index {int(idx[bad][0])} out of range for a dataset of {n} samples")
        return np.where(idx < 0, idx + n, idx)

    def __getitem__(self, i: int) -> Sample:
        """Sample ``i``: field name -> zero-copy ``memoryview`` (device tensor for gds), plus ``"__key__"``."""
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise ArgumentError(f"dataset index must be an int, got {type(i).__name__}", field="index")
        n = len(self)
        if not -n <= int(i) < n:
            raise SampleIndexError(f"sample index {int(i)} out of range for a dataset of {n} samples")
        return self.read_many([int(i)])[0]

    def read_many(self, indices: Sequence[int] | np.ndarray) -> list[Sample]:
        """Read a batch through the planner; one dict per index, in the given order.

        Raises:
            IndexError: an index is out of range.
            ReadError: a shard is shorter than its index says (names shard, key, field).
            ChecksumError: with ``verify=True``, a field's bytes differ from the index.
        """
        opened = self._state()
        catalog = opened.catalog
        direct = opened.reader.direct

        def windows_for(extents: list[tuple[int, int]], file_size: int) -> list[Window]:
            return coalesce(
                extents, file_size=file_size, max_window=self._max_window, max_gap=self._max_gap, direct=direct
            )

        run = _contiguous_run(indices, catalog.num_samples)
        if run is not None:  # the sequential case: no sorting, grouping or gathers
            lo, hi = run
            out: list[Sample | None] = [None] * (hi - lo)
            jobs = _run_jobs(opened, lo, hi, windows_for)
        else:
            idx = self._indices(indices, catalog.num_samples)
            out = [None] * len(idx)
            if not len(idx):
                return []
            pos, local = catalog.locate(idx)
            jobs = []
            for shard_pos in dict.fromkeys(pos.tolist()):
                where = np.nonzero(pos == shard_pos)[0]
                jobs.append(ShardJob(opened.states[shard_pos], local[where], where, windows_for))
        algo = catalog.manifest.checksum_algo if self._verify else None
        read_jobs(jobs, opened.reader, opened.pool, algo)
        for job in jobs:
            job.hand_out(out)
        return out  # type: ignore[return-value]

    def read_fields_into(self, indices: Sequence[int] | np.ndarray, out: Mapping[str, np.ndarray]) -> list[str]:
        """Read field ``f`` of sample ``indices[i]`` into row ``i`` of ``out[f]``; return the keys.

        For fields of one size in every sample: each ``out[f]`` is a writable
        C-contiguous array with one row per index, whose row is exactly the field's
        size in bytes (any dtype: the bytes are copied as they are stored). Fields
        whose :attr:`schema` kind is ``npy`` are read as their array payload (the
        ``.npy`` header skipped at the offset the index recorded), so the row holds
        ``FieldSchema.nbytes``; every other field is read as its stored bytes. The
        buffered backend reads each field with one ``pread`` straight into its row
        (with ``verify=True`` an npy header is read too: the checksum covers the whole
        member); the other host backends read windows and copy. This is how
        :class:`feedline.Loader` fills a batch slot without decoding anything.

        Raises:
            IndexError: an index is out of range.
            ConfigError: an ``out`` array of the wrong shape, or the gds backend
                (which reads into device memory).
            ReadError: a sample lacks a field or holds it at another size (names
                shard, key and field), or a shard is shorter than its index says.
            ChecksumError: with ``verify=True``, a field's bytes differ from the index.
        """
        opened = self._state()
        idx = self._indices(indices, opened.catalog.num_samples)
        algo = opened.catalog.manifest.checksum_algo if self._verify else None
        return read_columns(opened, idx, out, algo, self.read_many)

    def read_fields(self, indices: Sequence[int] | np.ndarray, fields: Sequence[str]) -> tuple[list[str], Views]:
        """The keys of samples ``indices`` and, per field of ``fields``, one zero-copy byte
        view per sample (``None`` where a sample lacks the field), in the given order.

        Only those fields are read, each of any size. The buffered backend reads each
        with one ``pread`` into one pooled buffer for the batch (no window planning, no
        dict per sample); the other backends, and ``verify=True``, read the windows as
        :meth:`read_many` does. The views are valid while they are referenced (their
        buffer is reused only after). This is how :class:`feedline.Loader` reads the
        JPEGs it decodes straight into batch rows.

        Raises:
            IndexError: an index is out of range.
            ReadError: a shard is shorter than its index says (names shard, key, field).
            ChecksumError: with ``verify=True``, a field's bytes differ from the index.
        """
        opened = self._state()
        idx = self._indices(indices, opened.catalog.num_samples)
        algo = opened.catalog.manifest.checksum_algo if self._verify else None
        return read_members(opened, idx, fields, algo, self.read_many)

    def gather_labels(self, indices: Sequence[int] | np.ndarray, out: Mapping[str, np.ndarray]) -> None:
        """Fill ``out[f][i]`` with the value of label field ``f`` of sample ``indices[i]``.

        The values were parsed at pack (or ``feedline index``) time into an int64
        column of the index: this is one numpy gather, with no read and no parse. Each
        ``out[f]`` is a writable int64 array of shape ``(len(indices),)``. The value is
        the integer the field's text holds (``b"7\n"`` -> 7), as the ``.cls`` decoder
        gives it; a field decoded another way per sample (``label.txt`` as text)
        still has its column here.

        Raises:
            IndexError: an index is out of range.
            ConfigError: a field whose :attr:`schema` kind is not ``label``, or an
                ``out`` array of the wrong dtype or shape.
        """
        catalog = self._state().catalog
        gather_labels(catalog, self._indices(indices, catalog.num_samples), out)

    def gather_columns(self, indices: Sequence[int] | np.ndarray, out: Mapping[str, np.ndarray]) -> None:
        """Fill ``out[f][i]`` with the value of field ``f`` of sample ``indices[i]``, for
        fields the index holds as columns: a ``label`` field (int64), or a ``raw`` /
        ``npy`` field whose :attr:`schema` entry has ``column=True`` (a value of at most 64
        bytes a sample: a scalar ``rating.f32``, a ``user.npy`` of shape ``()``, a small
        vector). One numpy gather, no read, no parse; the values are those the field
        decodes to per sample (dtype in native byte order, shape ``schema[f].shape``).
        Each ``out[f]`` is a writable array of that dtype and shape ``(len(indices),
        *shape)``.

        Raises:
            IndexError: an index is out of range.
            ConfigError: a field that is not a column, or an ``out`` array of the wrong
                dtype or shape.
        """
        catalog = self._state().catalog
        gather_columns(catalog, self._indices(indices, catalog.num_samples), out)

    def labels(self, field: str = "cls") -> np.ndarray:
        """Every sample's value of label field ``field``: ``int64[len(self)]``, sample order.

        What torchvision's ``ImageFolder.targets`` is, taken from the index (no read): the
        way to split by class, or by speaker when the table's speaker column is the label
        (``feedline pack clips/ --labels metadata.csv --label-column speaker``)::

            held_out = np.isin(ds.labels(), [4, 5])
            train, val = ds.subset(np.flatnonzero(~held_out)), ds.subset(np.flatnonzero(held_out))

        Raises:
            ConfigError: ``field`` is not an integer label in every sample (its schema kind
                is not ``label``).
        """
        return all_labels(self, field)

    def column(self, names: str | Sequence[str], field: str = "json") -> np.ndarray:
        """Every sample's value of column(s) ``names`` of the table row kept in ``field``
        (``feedline pack --labels train.csv`` puts the row's other columns in ``json``):
        ``(len(self),)`` for one name, ``(len(self), k)`` for a list of k, in sample order.

        Selecting samples by a metadata column (a Kaggle CV fold) and multi-label or
        float targets, without re-packing and without reading an image::

            fold = ds.column("fold")
            train, val = ds.subset(np.flatnonzero(fold != k)), ds.subset(np.flatnonzero(fold == k))
            targets = ds.column(["label_a", "label_b", "score"])   # float64[len(ds), 3]

        Reads only ``field`` (~0.1 s per 10,000 samples); numbers come back numeric
        (int64 when all are ints, else float64), text as a string array.

        Raises:
            ConfigError: no such field, or a sample without it or the column (named).
        """
        return all_columns(self, names, field)

    def read_ranges(self, i: int, field: str, ranges: Sequence[tuple[int, int]]) -> np.ndarray:
        """Parts of one member: the bytes of each ``(start, length)`` of ``ranges`` (from the
        first byte of field ``field`` of sample ``i``), one after the other, as ``uint8``.

        What a patch of a large array needs: the rows of a ``32 x 96 x 96`` box of an
        ``int16[64, 256, 256]`` ``.npy`` are 19 % of its bytes (:class:`feedline.patches.Patches`
        reads them so). With ``io="direct"`` ranges under 1 MiB apart are one read of the
        4096-byte blocks around them.

        Raises:
            ConfigError: the sample lacks ``field``, a range outside the member, or a GDS dataset.
            ReadError: the shard is shorter than its index says.
        """
        opened = self._state()
        idx = int(self._indices([i], opened.catalog.num_samples)[0])
        return read_ranges(opened, idx, field, ranges)

    def sizes(self, field: str) -> np.ndarray:
        """Each sample's stored bytes of ``field``: ``int64[len(self)]``, -1 where a sample
        lacks it; from the index (no read).

        A length for ``Loader(lengths=...)`` (batches of similar lengths): a PCM WAV's
        bytes grow with its frames, a token ``.npy``'s with its tokens, a JPEG's roughly
        with its pixels.

        Raises:
            ConfigError: no sample has ``field`` (the fields are named).
        """
        if field not in self.fields:
            raise ConfigError(f"sizes: no field {field!r} in this dataset (fields: {self.fields})", field=field)
        return self._state().catalog.member_spans(field)[:, 1].copy()

    def subset(self, indices: Sequence[int] | np.ndarray) -> PackedSubset:
        """Samples ``indices`` of this dataset as a packed dataset of their own (a train or
        validation split), read as fast as the whole; sample ``i`` of it is sample
        ``indices[i]`` here. ``Loader`` does the same with a ``torch.utils.data.Subset``
        (what ``random_split`` returns) of a packed dataset.

        Raises:
            ArgumentError / SampleIndexError: ``indices`` not ints, or out of range.
        """
        return PackedSubset(self, indices)

    def __iter__(self) -> Any:
        n = len(self)
        for lo in range(0, n, 64):
            yield from self.read_many(range(lo, min(lo + 64, n)))

    def release_buffers(self) -> int:
        """Drop the read buffers cached for reuse; the bytes they held (a buffer still
        viewed by a caller stays valid and is freed with its last view).

        A reader that from now on fills its own arrays (:meth:`read_fields_into` with the
        buffered backend) no longer needs them: :class:`feedline.Loader` calls this once
        its batch plan reads every field straight into slot rows, so the buffers the
        first batch was read into do not stay resident for the whole run.
        """
        opened = self._opened
        if opened is None or opened.pid != os.getpid():
            return 0
        held = opened.pool.cached_bytes()
        opened.pool.clear()
        return held

    # -- lifetime ----------------------------------------------------------------
    def close(self) -> None:
        """Close every shard handle; the dataset reopens lazily if used again."""
        with self._open_lock:
            if self._opened is not None and self._opened.pid == os.getpid():
                self._opened.close()
            self._opened = None

    def __enter__(self) -> PackedDataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PackedDataset({self._root!r}, io={self._io!r}, verify={self._verify})"


def _contiguous_run(indices: Any, n: int) -> tuple[int, int] | None:
    """``(lo, hi)`` when ``indices`` is exactly ``lo, lo + 1, ..., hi - 1`` within ``[0, n)``, else None.

    Only a non-empty ``range`` of step 1, list of ``int`` or 1-D integer array
    qualifies (anything else takes the general path, which also raises the errors).
    """
    if isinstance(indices, range):
        if indices.step == 1 and 0 <= indices.start < indices.stop <= n:
            return indices.start, indices.stop
        return None
    if type(indices) is list:
        if not indices or type(indices[0]) is not int or not 0 <= indices[0] < n - len(indices) + 1:
            return None
        lo = indices[0]
        # exact ints only (a float or bool equal to an int must still be rejected by the general path)
        if all(type(i) is int for i in indices) and indices == list(range(lo, lo + len(indices))):
            return lo, lo + len(indices)
        return None
    if not isinstance(indices, np.ndarray) or indices.ndim != 1 or not indices.size:
        return None
    if indices.dtype.kind not in "iu":
        return None
    lo, last = int(indices[0]), int(indices[-1])
    if not 0 <= lo <= last < n or last - lo != indices.size - 1:
        return None
    if indices.size > 1 and not bool((indices[1:] > indices[:-1]).all()):
        return None  # strictly increasing with these ends means contiguous
    return lo, last + 1


def _run_jobs(opened: _Opened, lo: int, hi: int, windows_for: Any) -> list[ShardJob]:
    """One :meth:`ShardJob.run` per shard that global samples ``lo:hi`` touch."""
    starts = opened.catalog.first_of_shard
    jobs = []
    g = lo
    while g < hi:
        s = bisect.bisect_right(starts, g) - 1  # skips empty shards
        end = min(hi, starts[s + 1])
        jobs.append(ShardJob.run(opened.states[s], g - starts[s], end - starts[s], g - lo, windows_for))
        g = end
    return jobs


def open_dataset(
    root: str | os.PathLike[str],
    *,
    io: str = "auto",
    verify: bool = False,
    storage_options: dict[str, Any] | None = None,
    max_window: int = DEFAULT_MAX_WINDOW,
    max_gap: int = DEFAULT_MAX_GAP,
) -> PackedDataset:
    """Open a packed dataset (a folder, or an fsspec URL such as ``s3://bucket/prefix``).

    Args:
        root: the dataset folder holding ``manifest.json`` (or that file, a ``file://`` URL, ``~``
            expanded), or a remote URL such as ``s3://bucket/prefix``.
        io: ``"auto"`` (GDS when engaged, else buffered; see ``ds.backend``),
            ``"buffered"``, ``"direct"`` (O_DIRECT) or ``"gds"`` (device memory;
            fields come back as CUDA ``uint8`` tensors, so use it from the main
            process or thread workers: CUDA does not survive ``fork``). Remote
            roots use ranged reads whatever ``auto`` would pick.
        verify: checksum every field read; a mismatch raises ChecksumError.
        storage_options: passed to fsspec for remote roots (e.g. ``endpoint_url``).
        max_window: largest coalesced read in bytes (multiple of 4096).
        max_gap: largest hole between samples that one window reads through.

    The manifest and every index are validated now (a truncated shard, a bad
    index or a missing file is a FormatError here, before any buffer exists).

    Raises:
        ConfigError: bad options, or a missing optional dependency (fsspec).
        FormatError / ChecksumError: an invalid dataset.
        DeviceError: ``io="gds"`` without kvikio or CUDA.
    """
    ds = PackedDataset(
        root, io=io, verify=verify, storage_options=storage_options, max_window=max_window, max_gap=max_gap
    )
    ds._state()
    return ds
