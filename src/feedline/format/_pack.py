"""pack(): turn folders of small files into tar shards, indexes and a manifest.

The run is restartable: the manifest of a previous run is removed first, each
shard appears under its final name only when complete, and a rerun reuses a
complete shard only when its content is what the sources hold now: the same
keys, fields and sizes, and the checksum of every source file (read again)
equal to the one in the shard's index. Dates are never trusted (``cp -p``,
``rsync -a`` and ``tar x`` give new bytes old mtimes). The manifest is written
last; until then the output folder holds no dataset. One pack or index_tars
writes a folder at a time (:mod:`feedline.format._lock`): a second one is
refused at once, naming the first one's pid.

Memory stays flat whatever the file sizes: files below 4 MiB are read whole
(ahead, by the ``workers`` threads); larger ones are streamed into the shard
in chunks, checksummed on the way.
"""

from __future__ import annotations

import errno
import os
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from feedline.errors import ArgumentError, ConfigError, FormatError
from feedline.format._atomic import fsync_dir, named, remove_quietly, temp_name
from feedline.format._checksum import check_algo, checksum, checksum_function, hasher, hexdigest
from feedline.format._files import (
    NOFOLLOW,
    open_fd,
    open_regular,
    path_argument,
    path_list,
    source_error,
)
from feedline.format._index import FORMAT_VERSION, ShardIndex
from feedline.format._lock import DATASET_LOCK, hold_dataset, release
from feedline.format._manifest import (
    MANIFEST_NAME,
    Manifest,
    ShardInfo,
    field_stats,
    write_manifest,
)
from feedline.format._sources import PlannedSample, SourceFile, SourceRules, collect, plan_shards
from feedline.format._tar import KEY_ESCAPE
from feedline.format._writer import FilePayload, Payload, ShardWriter, check_align

SHARD_PATTERN = "shard-{:06d}.tar"
STREAM_AT = 4 << 20
"""Files of this many bytes or more are streamed into the shard, never held whole."""
_HASH_CHUNK = 4 << 20


class PackWarning(UserWarning):
    """Something the user should hear about a pack that still succeeds
    (skipped files, fields only some samples have, empty class folders)."""


@dataclass(frozen=True)
class PackProgress:
    """What :func:`pack` reports to its ``progress`` callback after each sample."""

    files_done: int
    files_total: int
    bytes_done: int
    bytes_total: int
    shards_done: int
    shards_total: int
    shards_reused: int


ProgressFn = Callable[[PackProgress], None]
WarnFn = Callable[[str], None]
_Loaded = tuple[PlannedSample, list[tuple[str, Payload]], list[int | None]]


def _read_file(path: str, size: int, nofollow: bool = False) -> bytes:
    """Whole file (planned ``size`` bytes, below :data:`STREAM_AT`) with raw ``os.read`` calls.

    One syscall for a file of its planned ``size``. The file must still be a
    regular file (:func:`~feedline.format._files.open_fd`: one replaced by a FIFO
    after the listing would block the read forever, ``/dev/zero`` never ends). A
    file that changed size is read as it is now, up to :data:`STREAM_AT` bytes:
    one that grew past that is refused, never held whole. With ``nofollow``, a
    symbolic link at ``path`` is refused (``ELOOP``), not followed.

    Raises:
        OSError: as ``open_fd``; ``EFBIG`` for a file that grew past :data:`STREAM_AT`.
    """
    limit = max(size, STREAM_AT)
    fd = open_fd(path, NOFOLLOW if nofollow else 0)
    try:
        chunks: list[bytes] = []
        got = 0
        while got <= limit and (chunk := os.read(fd, limit + 1 - got)):
            chunks.append(chunk)
            got += len(chunk)
    finally:
        os.close(fd)
    if got > limit:
        raise OSError(errno.EFBIG, f"grew from {size} to more than {limit} bytes while it was packed", path)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _read_sample(sample: PlannedSample, algo: str) -> _Loaded:
    """The sample's payloads: small files read whole (and checksummed), large ones to stream."""
    fn = checksum_function(algo)
    fields: list[tuple[str, Payload]] = []
    sums: list[int | None] = []
    for f in sample.files:
        if f.data is None and f.size >= STREAM_AT:
            fields.append((f.field, FilePayload(f.path, f.size, f.nofollow)))
            sums.append(None)
            continue
        data = f.data if f.data is not None else _read_source(f, sample.key)
        fields.append((f.field, data))
        sums.append(fn(data))
    return sample, fields, sums


def _read_source(f: SourceFile, key: str) -> bytes:
    try:
        return _read_file(f.path, f.size, f.nofollow)
    except OSError as e:
        raise source_error(e, f.path, key=key, field=f.field) from None


def _source_checksum(f: SourceFile, algo: str) -> int:
    """Checksum of a source's bytes as they are now (read in chunks)."""
    if f.data is not None:
        return checksum(f.data, algo)
    h = hasher(algo)
    try:
        with open_regular(f.path) as src:
            while chunk := src.read(_HASH_CHUNK):
                h.update(chunk)
    except OSError as e:
        raise source_error(e, f.path, field=f.field) from None
    return h.intdigest()


def _loaded(samples: list[PlannedSample], algo: str, pool: ThreadPoolExecutor | None, window: int) -> Iterator[_Loaded]:
    """Samples with their bytes and checksums, in order; at most ``window`` read ahead."""
    if pool is None:
        for s in samples:
            yield _read_sample(s, algo)
        return
    pending: deque[Future[_Loaded]] = deque()
    it = iter(samples)
    for s in it:
        pending.append(pool.submit(_read_sample, s, algo))
        if len(pending) >= window:
            break
    while pending:
        done = pending.popleft().result()
        nxt = next(it, None)
        if nxt is not None:
            pending.append(pool.submit(_read_sample, nxt, algo))
        yield done


def _reusable(path: Path, planned: list[PlannedSample], align: int, algo: str,
              pool: ThreadPoolExecutor | None) -> ShardIndex | None:
    """The index of a complete shard from an earlier run, if it holds what the sources hold now.

    It must list the same keys, fields and sizes, and each member's checksum
    must equal the checksum of its source file read now.
    """
    index_path = path.with_name(path.name + ".idx")
    if not (path.is_file() and index_path.is_file()):
        return None
    try:
        index = ShardIndex.load(index_path, shard_size=path.stat().st_size, shard=path.name)
    except FormatError:
        return None
    if index.align != align or index.checksum_algo != algo or index.keys != [s.key for s in planned]:
        return None
    expected = [(f.field, f.size) for s in planned for f in s.files]
    actual = [(index.fields[int(r["field"])], int(r["size"])) for r in index.members]
    if actual != expected:
        return None
    files = [f for s in planned for f in s.files]
    sums = pool.map(_source_checksum, files, [algo] * len(files)) if pool else (_source_checksum(f, algo) for f in files)
    stored = index.members["checksum"].tolist()
    return index if all(a == b for a, b in zip(sums, stored, strict=True)) else None


def _reuse_info(path: Path, index: ShardIndex, algo: str) -> ShardInfo:
    data = path.with_name(path.name + ".idx").read_bytes()
    return ShardInfo(
        name=path.name,
        index=path.name + ".idx",
        size=index.shard_size,
        index_size=len(data),
        num_samples=index.num_samples,
        checksum=hexdigest(index.shard_checksum),
        index_checksum=hexdigest(checksum(data, algo)),
    )


def _clean_stale(out: Path, keep: int) -> None:
    """Remove shards of an earlier, larger run and temp files of an interrupted one
    (only files named like ours)."""
    for temp in out.glob(".shard-*.partial"):
        remove_quietly(temp)
    k = keep
    while True:
        path = out / SHARD_PATTERN.format(k)
        idx = path.with_name(path.name + ".idx")
        if not (path.exists() or idx.exists()):
            return
        remove_quietly(path)
        remove_quietly(idx)
        k += 1


def _check_out(out: Path, sources: list[str | os.PathLike[str]]) -> None:
    """The output folder may lie inside a source (it is left out of the walk) but may not be one."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {str(out)!r} is a file, not a folder", path=str(out), fix="give a folder (it is created)")
    real = os.path.realpath(out)
    for src in sources:
        if os.path.isdir(src) and os.path.realpath(src) == real:
            raise ConfigError(
                f"the output folder {str(out)!r} is the source folder: its shards would be packed on the next run",
                path=str(out), fix="write to another folder, e.g. a sibling, or a sub-folder (left out of the sources)",
            )


def _check_args(shard_size: object, workers: object) -> None:
    if isinstance(shard_size, bool) or not isinstance(shard_size, int) or shard_size <= 0:
        raise ConfigError(f"shard_size: must be a positive number of bytes, got {shard_size!r}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"workers: must be an integer >= 1, got {workers!r}")


def pack(
    sources: Iterable[str | os.PathLike[str]] | str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    shard_size: int = 1 << 30,
    align: int = 0,
    workers: int = 1,
    checksum_algo: str = "xxh3",
    progress: ProgressFn | None = None,
    durable: bool = True,
    rules: SourceRules | None = None,
    warn: WarnFn | None = None,
) -> Manifest:
    """Pack files into shards ``out_dir/shard-NNNNNN.tar`` (+ ``.idx``) and a manifest.

    Args:
        sources: folders and/or list files (see :mod:`feedline.format._sources`).
        out_dir: output folder (created). A manifest already there is removed
            first; complete shards of an earlier run whose content equals the
            sources' are reused. It may lie inside a source folder (it is
            left out of the walk), but may not be one.
        shard_size: target shard size in bytes; samples are never split.
        align: 0 or a multiple of 512 (4096 for O_DIRECT / GDS): each sample's
            first payload byte is padded to this boundary.
        workers: threads reading and checksumming files (order is preserved).
        checksum_algo: ``"xxh3"`` or ``"crc32c"``.
        progress: called with a :class:`PackProgress` after each sample.
        durable: fsync every shard, index and the manifest (and their folder)
            so the dataset survives a power loss (default). False skips the
            fsyncs, for scratch copies: writes stay atomic (temp file, rename),
            so a killed run still leaves no manifest naming a partial shard,
            but after a power loss or kernel crash `feedline verify` may find
            shards the manifest lists incomplete.
        rules: how files become samples: the key rule, labels from class
            folders or from a labels file (CSV/TSV/JSONL/COCO JSON), include/exclude
            patterns, symbolic links
            (:class:`~feedline.format._sources.SourceRules`; default: the WebDataset rule).
        warn: called with one line per thing to hear about (skipped files,
            fields only some samples have, empty class folders); default:
            :func:`warnings.warn` with a :class:`PackWarning`.

    Returns:
        The manifest written last to ``out_dir/manifest.json`` (with the class
        list when labels come from folders or are class names in a labels file).

    Raises:
        ConfigError: bad arguments or unusable sources (a source that does not
            exist, a symbolic-link loop, ``out_dir`` that is a file or a source).
        WriteError: another pack or index_tars writing into ``out_dir`` now (it holds
            the folder's lock, :data:`~feedline.format._lock.DATASET_LOCK`).
        ReadError: a source file that cannot be read, or changed size while packed.
        OSError: a folder that cannot be read, a file that cannot be written (named by the error).
    """
    _check_args(shard_size, workers)
    align = check_align(align)
    algo = check_algo(checksum_algo)
    srcs: list[str | os.PathLike[str]] = list(path_list(sources, "sources"))
    out = Path(path_argument(out_dir, "out_dir"))
    for name, fn in (("progress", progress), ("warn", warn)):
        if fn is not None and not callable(fn):
            raise ArgumentError(f"{name} must be callable, got {fn!r}", field=name)
    _check_out(out, srcs)
    found = collect(srcs, rules, skip=out)
    for line in found.notes():
        if warn is not None:
            warn(line)
        else:
            warnings.warn(line, PackWarning, stacklevel=2)
    samples = found.samples
    plan = plan_shards(samples, shard_size, align)
    out.mkdir(parents=True, exist_ok=True)
    lock = hold_dataset(out)
    try:
        if (out / MANIFEST_NAME).exists():
            remove_quietly(out / MANIFEST_NAME)
            if durable:
                fsync_dir(out)
        state = _Counter(progress, sum(s.sources for s in samples), sum(s.nbytes for s in samples), len(plan))
        infos, indexes = _write_shards(plan, out, align, algo, workers, state, durable)
        remove_quietly(temp_name(out / MANIFEST_NAME))
        _clean_stale(out, len(plan))
        manifest = Manifest(
            version=FORMAT_VERSION,
            checksum_algo=algo,
            align=align,
            shards=tuple(infos),
            fields=field_stats(indexes),
            num_samples=sum(i.num_samples for i in infos),
            classes=found.classes,
            key_escape=KEY_ESCAPE if (rules or SourceRules()).key_rule != "webdataset" else None,
        )
        write_manifest(out, manifest, durable=durable)
    finally:
        release(lock, out / DATASET_LOCK)
    return manifest


def _write_shards(
    plan: list[list[PlannedSample]], out: Path, align: int, algo: str, workers: int, state: _Counter,
    durable: bool = True,
) -> tuple[list[ShardInfo], list[ShardIndex]]:
    """Write (or reuse) every planned shard, in order."""
    infos: list[ShardInfo] = []
    indexes: list[ShardIndex] = []
    pool = ThreadPoolExecutor(workers, thread_name_prefix="feedline-pack") if workers > 1 else None
    try:
        for k, planned in enumerate(plan):
            path = out / SHARD_PATTERN.format(k)
            index = _reusable(path, planned, align, algo, pool)
            if index is not None:
                infos.append(_reuse_info(path, index, algo))
                state.shard_done(planned, reused=True)
            else:
                try:
                    with ShardWriter(path, align=align, checksum_algo=algo, durable=durable) as writer:
                        for sample, fields, sums in _loaded(planned, algo, pool, 4 * workers):
                            writer.write_sample(sample.key, fields, sums)
                            state.sample_done(sample)
                        infos.append(writer.close())
                except OSError as e:  # a full disk, a read-only folder: name the shard
                    raise named(e, path) from None
                index = writer.index
                state.shard_done([], reused=False)
            if index is not None:
                indexes.append(index)
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    return infos, indexes


class _Counter:
    def __init__(self, callback: ProgressFn | None, files: int, nbytes: int, shards: int) -> None:
        self.callback = callback
        self.files_total, self.bytes_total, self.shards_total = files, nbytes, shards
        self.files = self.nbytes = self.shards = self.reused = 0

    def sample_done(self, sample: PlannedSample) -> None:
        self.files += sample.sources
        self.nbytes += sample.nbytes
        self._report()

    def shard_done(self, skipped: list[PlannedSample], *, reused: bool) -> None:
        for s in skipped:
            self.files += s.sources
            self.nbytes += s.nbytes
        self.shards += 1
        self.reused += int(reused)
        self._report()

    def _report(self) -> None:
        if self.callback is not None:
            self.callback(
                PackProgress(
                    self.files, self.files_total, self.nbytes, self.bytes_total,
                    self.shards, self.shards_total, self.reused,
                )
            )
