"""Reading one shard's part of a batch: plan windows, read them, slice views.

For the requested samples of one shard, :func:`read_shard_samples` asks the
planner for aligned windows, reads each window with a single backend request
into a pooled buffer (one buffer per window, never one per sample), checks
direct windows against the GDS alignment rule, and builds each sample's dict
of zero-copy views. With a checksum algorithm it verifies every field.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from feedline.errors import ChecksumError, ReadError
from feedline.format import checksum
from feedline.io._buffers import HostBufferPool, buffer_address
from feedline.io._catalog import ShardEntry
from feedline.io.backends import Reader
from feedline.io.planner import Window, coalesce, validate_direct
from feedline.observe import spans

_TRUNC_FIX = "the shard changed or was truncated after opening; re-copy it and run `feedline verify`"


class ShardReadState:
    """Per-shard reading state: the lazily opened backend handle, shared by threads."""

    def __init__(self, entry: ShardEntry) -> None:
        self.entry = entry
        self._handle: Any = None
        self._lock = threading.Lock()

    def handle(self, reader: Reader) -> Any:
        """The open handle for this shard (opened once, on first use)."""
        handle = self._handle
        if handle is None:
            with self._lock:
                if self._handle is None:
                    self._handle = reader.open(self.entry.path)
                handle = self._handle
        return handle

    def close(self, reader: Reader) -> None:
        """Close the handle if it was opened."""
        with self._lock:
            if self._handle is not None:
                reader.close(self._handle)
                self._handle = None


def _buffer(reader: Reader, pool: HostBufferPool, size: int) -> tuple[Any, int]:
    allocate = getattr(reader, "allocate", None)
    if allocate is not None:  # device memory (gds)
        buf = allocate(size)
        return buf, int(buf.data_ptr())
    buf = pool.acquire(size)
    return buf, buffer_address(buf)


def _truncated(entry: ShardEntry, samples: np.ndarray, w: Window, got: int) -> ReadError:
    """The error for a short window read, naming the first affected member."""
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
                    fix=_TRUNC_FIX,
                )
    return ReadError(f"short read of window at {w.start}", shard=entry.name, fix=_TRUNC_FIX)


def _read_window(state: ShardReadState, reader: Reader, pool: HostBufferPool, w: Window, samples: np.ndarray) -> Any:
    entry = state.entry
    if w.size == 0:  # only empty members: nothing to read
        return pool.acquire(0)
    buf, address = _buffer(reader, pool, w.size)
    if reader.direct:
        validate_direct(w, address, shard=entry.name)
    with spans.span("read", shard=entry.name, bytes=w.size, backend=reader.name):
        got = reader.read_into(state.handle(reader), w.start, buf)
    if got < w.length:
        raise _truncated(entry, samples, w, got)
    return buf


def read_shard_samples(
    state: ShardReadState,
    reader: Reader,
    pool: HostBufferPool,
    local: np.ndarray,
    positions: np.ndarray,
    out: list[dict[str, Any] | None],
    *,
    algo: str | None,
    max_window: int,
    max_gap: int,
) -> None:
    """Read samples ``local`` of one shard; store sample dicts at ``out[positions]``.

    Args:
        local: sample numbers within the shard (may repeat, any order).
        positions: where each requested sample goes in ``out``.
        algo: checksum algorithm to verify every field with, or None.
    """
    entry = state.entry
    samples, inverse = np.unique(local, return_inverse=True)  # file order
    extents = list(zip(entry.first[samples].tolist(), entry.end[samples].tolist(), strict=True))
    windows = coalesce(extents, file_size=entry.size, max_window=max_window, max_gap=max_gap, direct=reader.direct)
    done: list[dict[str, Any]] = []
    for w in windows:
        buf = _read_window(state, reader, pool, w, samples)
        view = memoryview(buf) if reader.device == "cpu" else buf
        _slice_samples(entry, samples[w.lo : w.hi], view, w.start, algo, done)
    handed: set[int] = set()
    for pos, u in zip(positions.tolist(), inverse.reshape(-1).tolist(), strict=True):
        # A sample asked for twice gets two dicts (sharing the same views).
        out[pos] = done[u] if u not in handed else dict(done[u])
        handed.add(u)


def _slice_samples(
    entry: ShardEntry, samples: np.ndarray, view: Any, base: int, algo: str | None, done: list[dict[str, Any]]
) -> None:
    index = entry.index
    fields, keys, members = index.fields, index.keys, index.members
    starts = index.sample_start
    for s in samples.tolist():
        lo, hi = int(starts[s]), int(starts[s + 1])
        rec = members[lo:hi]
        sample: dict[str, Any] = {"__key__": keys[s]}
        for off, size, fid, want in zip(
            rec["offset"].tolist(), rec["size"].tolist(), rec["field"].tolist(), rec["checksum"].tolist(), strict=True
        ):
            part = view[off - base : off - base + size]
            if algo is not None:
                data = part if isinstance(part, memoryview) else part.cpu().numpy()
                if checksum(data, algo) != want:
                    raise ChecksumError(
                        "field bytes do not match their checksum",
                        shard=entry.name,
                        key=keys[s],
                        field=fields[fid],
                        fix="the shard is corrupt: re-copy it and run `feedline verify`",
                    )
            sample[fields[fid]] = part
        done.append(sample)
