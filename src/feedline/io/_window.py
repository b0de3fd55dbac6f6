"""Reading a batch: plan windows per shard, read them into arenas, slice views.

A :class:`ShardJob` is the part of a batch in one shard: its samples in file
order, the planner's aligned windows over them, and their member columns.
:func:`read_jobs` packs every window of the batch into a few arena buffers
(4096-aligned slots, at most ``ARENA_BYTES`` each, from the dataset's pool:
no allocation per sample or per window), checks direct windows against the
GDS alignment rule, reads each window with a single backend request, and
builds each sample's dict of zero-copy views. With a checksum algorithm it
verifies every field.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from feedline import spans
from feedline.errors import ChecksumError, ReadError
from feedline.format import checksum
from feedline.io._buffers import HostBufferPool, buffer_address
from feedline.io._catalog import ShardEntry
from feedline.io._handles import ShardReadState
from feedline.io.backends import Reader
from feedline.io.planner import Window, align_up, validate_direct

TRUNC_FIX = "the shard changed or was truncated after opening; re-copy it and run `feedline verify`"


ARENA_BYTES = 32 << 20  # windows of one batch share buffers of up to this size


def _allocate(reader: Reader, pool: HostBufferPool, size: int) -> Any:
    allocate = getattr(reader, "allocate", None)
    return allocate(size) if allocate is not None else pool.acquire(size)  # device (gds) or host


def _address(buf: Any) -> int:
    return int(buf.data_ptr()) if hasattr(buf, "data_ptr") else buffer_address(buf)


def _truncated(entry: ShardEntry, samples: np.ndarray, w: Window, got: int) -> ReadError | None:
    """The error for a short window read, naming the first affected member.

    ``None`` when every member of the window still lies within the bytes read:
    the file was cut only in the padding or trailer past them (windows are
    rounded up to the alignment), and the samples are whole.
    """
    limit = w.start + got
    index = entry.index
    for s in samples[w.lo : w.hi].tolist():
        members = index.sample_members(s)
        for off, size, fid in zip(members["offset"].tolist(), members["size"].tolist(), members["field"].tolist(), strict=True):
            if off + size > limit:
                return ReadError(
                    f"shard ended at byte {limit}, inside a member that needs bytes up to {off + size}",
                    shard=entry.name,
                    key=index.keys[s],
                    field=index.fields[fid],
                    fix=TRUNC_FIX,
                )
    return None


class ShardJob:
    """The part of a batch that lives in one shard: its samples (file order) and windows.

    ``local`` are the requested sample numbers within the shard and
    ``positions`` where each goes in the batch. :meth:`run` builds the job of
    a contiguous run of samples without sorting (the common sequential case).
    """

    def __init__(self, state: ShardReadState, local: np.ndarray, positions: np.ndarray, windows_for: Any) -> None:
        samples, inverse = np.unique(local, return_inverse=True)
        self._setup(state, samples, windows_for)
        self.inverse: np.ndarray | None = inverse
        self.positions = positions

    @classmethod
    def run(cls, state: ShardReadState, lo: int, hi: int, at: int, windows_for: Any) -> ShardJob:
        """The job of samples ``lo:hi`` of the shard (``lo < hi``), going to batch positions ``at:``."""
        job = cls.__new__(cls)
        job._setup(state, np.arange(lo, hi, dtype=np.int64), windows_for, (lo, hi))
        job.inverse = None
        job.positions = np.arange(at, at + hi - lo, dtype=np.int64)
        return job

    def _setup(self, state: ShardReadState, samples: np.ndarray, windows_for: Any, run: tuple[int, int] | None = None) -> None:
        self.state = state
        self.samples = samples
        entry = state.entry
        index = entry.index
        if run is None and len(samples) and int(samples[-1]) - int(samples[0]) == len(samples) - 1:
            run = (int(samples[0]), int(samples[-1]) + 1)  # unique and sorted, so contiguous
        if run is not None:
            lo, hi = run
            extents = list(zip(entry.first[lo:hi].tolist(), entry.end[lo:hi].tolist(), strict=True))
            bounds = index.sample_start[lo : hi + 1]
            rec = index.members[int(bounds[0]) : int(bounds[-1])]  # a slice: no row gather
            self.first: list[int] = (bounds - bounds[0]).tolist()
            self.keys: list[str] = index.keys[lo:hi]
        else:
            extents = list(zip(entry.first[samples].tolist(), entry.end[samples].tolist(), strict=True))
            rows, counts = _member_rows(index, samples)
            rec = index.members[rows]
            self.first = np.concatenate(([0], np.cumsum(counts))).tolist()
            self.keys = [index.keys[i] for i in samples.tolist()]
        self.windows: list[Window] = windows_for(extents, entry.size)
        self.done: list[dict[str, Any]] = []
        # Member columns of every requested sample, fetched once per shard and batch.
        self.offsets: list[int] = rec["offset"].tolist()
        self.sizes: list[int] = rec["size"].tolist()
        fields = index.fields
        self.names: list[str] = [fields[f] for f in rec["field"].tolist()]
        self.sums: list[int] = rec["checksum"].tolist()

    def hand_out(self, out: list[dict[str, Any] | None]) -> None:
        """Store each requested sample's dict at its position in ``out``."""
        if self.inverse is None:  # a run: samples in order, each asked for once
            at = int(self.positions[0])
            out[at : at + len(self.done)] = self.done
            return
        handed: set[int] = set()
        for pos, u in zip(self.positions.tolist(), self.inverse.reshape(-1).tolist(), strict=True):
            # A sample asked for twice gets two dicts (sharing the same views).
            out[pos] = self.done[u] if u not in handed else dict(self.done[u])
            handed.add(u)


def _arenas(jobs: list[ShardJob]) -> list[list[tuple[ShardJob, Window, int]]]:
    """Group every window of the batch into buffers of <= ARENA_BYTES (4096-aligned slots)."""
    groups: list[list[tuple[ShardJob, Window, int]]] = [[]]
    used = 0
    for job in jobs:
        for w in job.windows:
            slot = align_up(w.size, 4096)
            if groups[-1] and used + slot > ARENA_BYTES:
                groups.append([])
                used = 0
            groups[-1].append((job, w, used))
            used += slot
    return [g for g in groups if g]


def read_jobs(jobs: list[ShardJob], reader: Reader, pool: HostBufferPool, algo: str | None) -> None:
    """Read every window of ``jobs`` (one buffer per arena, not per sample) and slice the samples.

    This is the per-window hot loop: attribute lookups are hoisted and the span
    hook is only entered when a sink listens.
    """
    read_into = reader.read_into
    direct = reader.direct
    traced = spans.active()
    for group in _arenas(jobs):
        _, last_w, last_off = group[-1]
        buf = _allocate(reader, pool, last_off + last_w.size)
        whole = memoryview(buf) if reader.device == "cpu" else buf
        base = _address(buf) if direct else 0
        for job, w, off in group:
            if w.size:  # a window of only empty members reads nothing
                target = buf[off : off + w.size]
                if direct:
                    validate_direct(w, base + off, shard=job.state.entry.name)
                with job.state.lease() as handle:
                    if traced:
                        with spans.span("read", shard=job.state.entry.name, bytes=w.size, backend=reader.name):
                            got = read_into(handle, w.start, target)
                    else:
                        got = read_into(handle, w.start, target)
                if got < w.length:
                    error = _truncated(job.state.entry, job.samples, w, got)
                    if error is not None:
                        raise error
            _slice_samples(job, w, whole, w.start - off, algo)


def _member_rows(index: Any, samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Member row numbers of ``samples`` (in order) and each sample's member count."""
    lo = index.sample_start[samples]
    counts = index.sample_start[samples + 1] - lo
    total = int(counts.sum())
    # rows = lo[j] + k for k in range(counts[j]), for every j, without a Python loop
    shift = np.repeat(lo - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
    return shift + np.arange(total, dtype=np.int64), counts


def _slice_samples(job: ShardJob, w: Window, view: Any, base: int, algo: str | None) -> None:
    """Append one dict of zero-copy field views per sample of window ``w`` to ``job.done``."""
    offsets, sizes, names, first, keys = job.offsets, job.sizes, job.names, job.first, job.keys
    done = job.done
    for j in range(w.lo, w.hi):
        sample: dict[str, Any] = {"__key__": keys[j]}
        for m in range(first[j], first[j + 1]):
            start = offsets[m] - base
            sample[names[m]] = view[start : start + sizes[m]]
        if algo is not None:
            for m in range(first[j], first[j + 1]):
                verify_part(sample[names[m]], job.sums[m], algo, job.state.entry.name, keys[j], names[m])
        done.append(sample)


def verify_part(part: Any, want: int, algo: Any, shard: str, key: str, field: str) -> None:
    """Raise ChecksumError (naming shard, key and field) if ``part``'s checksum is not ``want``."""
    data = part if isinstance(part, memoryview) else part.cpu().numpy()
    if checksum(data, algo) != want:
        raise ChecksumError(
            "field bytes do not match their checksum",
            shard=shard,
            key=key,
            field=field,
            fix="the shard is corrupt: re-copy it and run `feedline verify`",
        )
