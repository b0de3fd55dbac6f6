"""Byte ranges inside one member: the part of a large array a sample needs (a patch's rows
of a 3D scan), not the whole member. :meth:`PackedDataset.read_ranges` is the entry."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from feedline.errors import ConfigError, ReadError
from feedline.io._buffers import PAGE, aligned_empty

__all__ = ["read_ranges"]

DIRECT_GAP = 1 << 20
"""With O_DIRECT, ranges at most this far apart are one read. The 32 row bands of a
32x96x96 box of an int16[64, 256, 256] scan (48 KiB each, 80 KiB apart) as one 4 MiB read:
``patches.Patches`` at 1.94x a DataLoader over ``np.load(mmap_mode="r")`` with the data
evicted, against 0.93x as 32 direct reads (bench/outside_newcomer14.py --cold, a virtio
disk). Through the page cache each range is its own read (copying the gap costs more)."""
MAX_WINDOW = 8 << 20


def read_ranges(opened: Any, index: int, field: str, ranges: Sequence[tuple[int, int]]) -> np.ndarray:
    """``uint8`` bytes of ``ranges`` (``(start, length)`` from the member's first byte) of
    field ``field`` of sample ``index`` (global, range-checked), one after the other.

    The buffered and remote readers read each range as it is; the direct reader joins ranges
    less than :data:`DIRECT_GAP` apart into one read of the 4096-byte blocks holding them,
    into an aligned buffer, and copies the ranges out.
    """
    catalog = opened.catalog
    offset, size = (int(v) for v in catalog.member_spans(field)[index])
    pos, within = catalog.locate(np.array([index]))
    state = opened.states[int(pos[0])]
    key = state.entry.index.keys[int(within[0])]
    if size < 0:
        raise ConfigError(f"read_ranges: sample {key!r} has no field {field!r}", field=field)
    reader = opened.reader
    if reader.name == "gds":
        raise ConfigError("read_ranges reads into host memory; this dataset reads with GDS",
                          fix="open it with io='direct' (or 'buffered') for partial reads")
    total = 0
    for start, length in ranges:
        if start < 0 or length < 0 or start + length > size:
            raise ConfigError(f"read_ranges: ({start}, {length}) is outside {field!r} of sample {key!r} "
                              f"({size} bytes)", field=field)
        total += length
    out = np.empty(total, np.uint8)
    gap = DIRECT_GAP if getattr(reader, "direct", False) else 0
    handle = state.hold()
    try:
        for lo, hi, parts in _windows(ranges, gap):
            if not gap and len(parts) == 1:  # straight into the output
                _read(reader, handle, offset + lo, hi - lo, state.entry.name, key, field, out[parts[0][2]:][:hi - lo])
                continue
            window = _read(reader, handle, offset + lo, hi - lo, state.entry.name, key, field)
            for start, length, at in parts:
                out[at:at + length] = window[start - lo:start - lo + length]
    finally:
        state.unhold()
    return out


def _windows(ranges: Sequence[tuple[int, int]], gap: int) -> list[tuple[int, int, list[tuple[int, int, int]]]]:
    """``ranges`` as reads: ``(lo, hi, [(start, length, position in the output)])``, a range
    joined to the read before when it starts at most ``gap`` bytes after it ends (and the read
    stays under 8 MiB)."""
    windows: list[tuple[int, int, list[tuple[int, int, int]]]] = []
    at = 0
    for start, length in ranges:
        if windows and 0 <= start - windows[-1][1] <= gap and start + length - windows[-1][0] <= MAX_WINDOW:
            lo, _, parts = windows[-1]
            windows[-1] = (lo, start + length, parts)
            parts.append((start, length, at))
        else:
            windows.append((start, start + length, [(start, length, at)]))
        at += length
    return windows


def _read(reader: Any, handle: Any, offset: int, size: int, shard: str, key: str, field: str,
          into: np.ndarray | None = None) -> np.ndarray:
    """``size`` bytes at ``offset`` of the shard (the direct reader: the 4096-byte blocks
    around them, read into an aligned buffer; the others into ``into`` when given)."""
    if not size:
        return np.empty(0, np.uint8)
    if getattr(reader, "direct", False):
        lo, hi = offset // PAGE * PAGE, -(-(offset + size) // PAGE) * PAGE
        buf = aligned_empty(hi - lo)
        if reader.read_into(handle, lo, buf) - (offset - lo) >= size:
            return buf[offset - lo:offset - lo + size]
    else:
        buf = np.empty(size, np.uint8) if into is None else into
        if reader.read_into(handle, offset, buf) == size:
            return buf
    raise ReadError(f"shard ended inside a member that needs bytes up to {offset + size}",
                    shard=shard, key=key, field=field)
