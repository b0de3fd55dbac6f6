"""Byte ranges inside one member: the part of a large array a sample needs (a patch's rows
of a 3D scan), not the whole member. :meth:`PackedDataset.read_ranges` is the entry."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from feedline.errors import ConfigError, ReadError
from feedline.io._buffers import PAGE, aligned_empty

__all__ = ["read_ranges"]


def read_ranges(opened: Any, index: int, field: str, ranges: Sequence[tuple[int, int]]) -> np.ndarray:
    """``uint8`` bytes of ``ranges`` (``(start, length)`` from the member's first byte) of
    field ``field`` of sample ``index`` (global, range-checked), one after the other.

    The buffered and remote readers read each range as it is; the direct reader reads the
    4096-byte blocks holding it into an aligned buffer and copies the range out.
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
    handle = state.hold()
    try:
        at = 0
        for start, length in ranges:
            _read(reader, handle, offset + start, out[at:at + length], state.entry.name, key, field)
            at += length
    finally:
        state.unhold()
    return out


def _read(reader: Any, handle: Any, offset: int, out: np.ndarray, shard: str, key: str, field: str) -> None:
    if not out.size:
        return
    if getattr(reader, "direct", False):
        lo, hi = offset // PAGE * PAGE, -(-(offset + out.size) // PAGE) * PAGE
        buf = aligned_empty(hi - lo)
        got = reader.read_into(handle, lo, buf) - (offset - lo)
        if got >= out.size:
            out[:] = buf[offset - lo:offset - lo + out.size]
            return
    else:
        got = reader.read_into(handle, offset, out)
        if got == out.size:
            return
    raise ReadError(f"shard ended inside a member that needs bytes up to {offset + out.size}",
                    shard=shard, key=key, field=field)
