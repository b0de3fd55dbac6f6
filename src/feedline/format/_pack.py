"""pack(): turn folders of small files into tar shards, indexes and a manifest.

The run is restartable: the manifest of a previous run is removed first, each
shard appears under its final name only when complete, and a rerun with the
same input reuses every complete shard whose index matches the plan. The
manifest is written last; until then the output folder holds no dataset.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from feedline.errors import ConfigError, FormatError
from feedline.format._atomic import fsync_dir, remove_quietly, temp_name
from feedline.format._checksum import check_algo, checksum, checksum_function, hexdigest
from feedline.format._index import FORMAT_VERSION, ShardIndex
from feedline.format._manifest import (
    MANIFEST_NAME,
    Manifest,
    ShardInfo,
    field_stats,
    write_manifest,
)
from feedline.format._sources import PlannedSample, collect, plan_shards
from feedline.format._writer import ShardWriter, check_align

SHARD_PATTERN = "shard-{:06d}.tar"


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
_Loaded = tuple[PlannedSample, list[tuple[str, bytes]], list[int]]


_MAX_READ = 0x7FFFF000  # Linux returns at most this much from one read()


def _read_file(path: str, size: int) -> bytes:
    """Whole file with raw ``os.read`` calls (no buffered-reader object per file).

    One syscall for a file of its planned ``size``; a file that grew, or one
    larger than a single read returns, is read on to its end.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        data = os.read(fd, size + 1)
        if len(data) < min(size + 1, _MAX_READ):  # a regular file hit its end
            return data
        chunks = [data]
        while chunk := os.read(fd, _MAX_READ):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _read_sample(sample: PlannedSample, algo: str) -> _Loaded:
    fn = checksum_function(algo)
    fields: list[tuple[str, bytes]] = []
    for f in sample.files:
        try:
            data = _read_file(f.path, f.size)
        except OSError as e:
            raise ConfigError(f"cannot read {f.path!r}: {e.strerror}", key=sample.key, field=f.field) from None
        fields.append((f.field, data))
    return sample, fields, [fn(d) for _, d in fields]


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


def _reusable(path: Path, planned: list[PlannedSample], align: int, algo: str) -> ShardIndex | None:
    """The index of a complete shard from an earlier run, if it matches the plan.

    It must list the same keys, fields and sizes, and no source file may have
    been modified after the shard was written.
    """
    index_path = path.with_name(path.name + ".idx")
    if not (path.is_file() and index_path.is_file()):
        return None
    written = path.stat().st_mtime_ns
    if any(f.mtime_ns >= written for s in planned for f in s.files):
        return None
    try:
        index = ShardIndex.load(index_path, shard_size=path.stat().st_size, shard=path.name)
    except FormatError:
        return None
    if index.align != align or index.checksum_algo != algo or index.keys != [s.key for s in planned]:
        return None
    expected = [(f.field, f.size) for s in planned for f in s.files]
    actual = [(index.fields[int(r["field"])], int(r["size"])) for r in index.members]
    return index if actual == expected else None


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
) -> Manifest:
    """Pack files into shards ``out_dir/shard-NNNNNN.tar`` (+ ``.idx``) and a manifest.

    Args:
        sources: folders and/or list files (see :mod:`feedline.format._sources`).
        out_dir: output folder (created). A manifest already there is removed
            first; complete shards of an interrupted run with the same input
            are reused.
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

    Returns:
        The manifest written last to ``out_dir/manifest.json``.

    Raises:
        ConfigError: bad arguments or unusable sources.
    """
    _check_args(shard_size, workers)
    align = check_align(align)
    algo = check_algo(checksum_algo)
    srcs = [sources] if isinstance(sources, (str, os.PathLike)) else list(sources)
    out = Path(out_dir)
    samples = collect(srcs, exclude=out)
    plan = plan_shards(samples, shard_size, align)
    out.mkdir(parents=True, exist_ok=True)
    if (out / MANIFEST_NAME).exists():
        remove_quietly(out / MANIFEST_NAME)
        if durable:
            fsync_dir(out)
    state = _Counter(progress, sum(len(s.files) for s in samples), sum(s.nbytes for s in samples), len(plan))
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
    )
    write_manifest(out, manifest, durable=durable)
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
            index = _reusable(path, planned, align, algo)
            if index is not None:
                infos.append(_reuse_info(path, index, algo))
                state.shard_done(planned, reused=True)
            else:
                with ShardWriter(path, align=align, checksum_algo=algo, durable=durable) as writer:
                    for sample, fields, sums in _loaded(planned, algo, pool, 4 * workers):
                        writer.write_sample(sample.key, fields, sums)
                        state.sample_done(sample)
                    infos.append(writer.close())
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
        self.files += len(sample.files)
        self.nbytes += sample.nbytes
        self._report()

    def shard_done(self, skipped: list[PlannedSample], *, reused: bool) -> None:
        for s in skipped:
            self.files += len(s.files)
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
