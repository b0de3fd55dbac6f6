"""The read planner: coalesce the byte extents a batch needs into aligned windows.

This is the "DMA queue" of seed 001. Given the extents (file offset, end) of the
samples a batch wants from one shard, :func:`coalesce` groups neighbours into
windows that are

* aligned: every window starts on an ``align`` boundary (4096);
* bounded: at most ``max_window`` bytes, unless one extent alone is bigger;
* gap-bounded: neighbours are merged only when the hole between them is at
  most ``max_gap`` bytes (reading a small hole beats a second request);
* sized for the backend: ``direct`` windows round their size up to ``align``
  (O_DIRECT and GDS need it; the read stops short at end of file), buffered
  windows round the end up and clamp it to the file size.

:func:`validate_direct` applies the GDS rule of
:func:`feedline.model.gds.check_alignment` (file offset, buffer address and
size) to a window and raises :class:`~feedline.errors.AlignmentError` with the
same reason text. The arithmetic is pure and exercised by hypothesis tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from feedline.errors import AlignmentError

DEFAULT_ALIGN = 4096
DEFAULT_MAX_WINDOW = 8 * 1024 * 1024
DEFAULT_MAX_GAP = 64 * 1024


class Window(NamedTuple):
    """One read request covering extents ``lo:hi`` of the sorted input.

    Attributes:
        start: file offset of the first byte read (multiple of ``align``).
        size: bytes requested (a multiple of ``align`` for direct windows).
        length: bytes the file holds in ``[start, start + size)``; a complete
            read returns exactly this many (``< size`` only for a direct window
            that runs into end of file).
        lo, hi: the extents this window covers, as a slice of the sorted input.
    """

    start: int
    size: int
    length: int
    lo: int
    hi: int

    @property
    def end(self) -> int:
        """File offset one past the last byte this window holds."""
        return self.start + self.length


def align_down(value: int, align: int) -> int:
    """Largest multiple of ``align`` that is <= ``value``."""
    return value - value % align


def align_up(value: int, align: int) -> int:
    """Smallest multiple of ``align`` that is >= ``value``."""
    return value + (-value) % align


def _check_params(file_size: int, align: int, max_window: int, max_gap: int) -> None:
    if align <= 0 or align & (align - 1):
        raise ValueError(f"align must be a positive power of two, got {align}")
    if max_window < align or max_window % align:
        raise ValueError(f"max_window must be a positive multiple of align={align}, got {max_window}")
    if max_gap < 0:
        raise ValueError(f"max_gap must be >= 0, got {max_gap}")
    if file_size < 0:
        raise ValueError(f"file_size must be >= 0, got {file_size}")


def _close(start: int, raw_end: int, lo: int, hi: int, file_size: int, align: int, direct: bool) -> Window:
    end = align_up(raw_end, align)
    if direct:
        return Window(start, end - start, min(end, file_size) - start, lo, hi)
    end = min(end, file_size)
    return Window(start, end - start, end - start, lo, hi)


def coalesce(
    extents: Sequence[tuple[int, int]],
    *,
    file_size: int,
    align: int = DEFAULT_ALIGN,
    max_window: int = DEFAULT_MAX_WINDOW,
    max_gap: int = DEFAULT_MAX_GAP,
    direct: bool = False,
) -> list[Window]:
    """Group sorted ``(offset, end)`` extents of one file into aligned windows.

    Args:
        extents: byte ranges ``[offset, end)``, sorted by ``offset``; they may
            overlap or repeat (a sample asked for twice).
        file_size: size of the file; every extent must end within it.
        align: window start (and, for direct, size) alignment in bytes.
        max_window: largest window in bytes (a multiple of ``align``); only a
            window holding a single extent may exceed it.
        max_gap: largest hole between neighbouring extents that is read through.
        direct: size windows for O_DIRECT/GDS (size rounded up to ``align``)
            instead of clamping them to the file size.

    Returns:
        Windows in file order; each extent ``i`` lies in exactly one window
        ``w`` with ``w.lo <= i < w.hi``, and inside ``[w.start, w.end)``.

    Raises:
        ValueError: bad parameters, unsorted extents, or an extent outside the file.
    """
    _check_params(file_size, align, max_window, max_gap)
    _check_extents(extents, file_size)
    if not extents:
        return []
    # One pass, arithmetic inlined (this runs once per requested sample).
    mask = align - 1
    windows: list[Window] = []
    append = windows.append
    start = extents[0][0] & ~mask
    raw_end = extents[0][1]
    lo = 0
    for i in range(1, len(extents)):
        offset, end = extents[i]
        new_end = end if end > raw_end else raw_end
        if offset - raw_end <= max_gap and ((new_end + mask) & ~mask) - start <= max_window:
            raw_end = new_end
            continue
        append(_close(start, raw_end, lo, i, file_size, align, direct))
        start, raw_end, lo = offset & ~mask, end, i
    append(_close(start, raw_end, lo, len(extents), file_size, align, direct))
    return windows


def _check_extents(extents: Sequence[tuple[int, int]], file_size: int) -> None:
    prev = -1
    for i, (offset, end) in enumerate(extents):
        if offset < prev:
            raise ValueError(f"extents must be sorted by offset; extent {i} starts at {offset}")
        if offset < 0 or end < offset or end > file_size:
            raise ValueError(f"extent {i} = [{offset}, {end}) lies outside the file of {file_size} bytes")
        prev = offset


def validate_direct(
    window: Window, buffer_address: int, *, align: int = DEFAULT_ALIGN, shard: str | None = None
) -> None:
    """Raise :class:`AlignmentError` unless ``window`` may be read with O_DIRECT/GDS.

    The rule and the reason text are :func:`feedline.model.gds.check_alignment`'s:
    the file offset, the buffer address and the size must all be multiples of
    ``align``.
    """
    from feedline.model.gds import check_alignment

    ok, reason = check_alignment(window.start, buffer_address, window.size, align)
    if not ok:
        raise AlignmentError(
            reason or "alignment violated",
            shard=shard,
            fix="read through the planner (it aligns windows) with buffers from an aligned pool",
        )
