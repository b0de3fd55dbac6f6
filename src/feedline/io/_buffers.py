"""Aligned host buffers and the small pool that recycles them.

Window reads land in buffers from :class:`HostBufferPool`. Each buffer's first
byte sits on a ``align``-byte boundary (O_DIRECT and GDS need 4096), so the same
pool serves every host backend. Zero-copy views handed to callers keep their
buffer alive; the pool only hands a buffer out again once no view of it is left
(CPython reference counting tells it so), so a caller's bytes are never
overwritten while the caller can still see them.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import numpy as np

PAGE = 4096
_MIN_CAPACITY = 64 * 1024


def buffer_address(buffer: Any) -> int:
    """Address of the first byte of a host buffer (numpy array or buffer-protocol object)."""
    if isinstance(buffer, np.ndarray):
        return int(buffer.__array_interface__["data"][0])
    return int(np.frombuffer(buffer, dtype=np.uint8).__array_interface__["data"][0])


def aligned_empty(nbytes: int, align: int = PAGE) -> np.ndarray:
    """A new uninitialised ``uint8`` array of ``nbytes`` whose address is ``align``-aligned.

    Over-allocates by ``align`` bytes and slices at the first aligned address; the
    returned array's ``.base`` is the owning allocation.
    """
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    if align <= 0 or align & (align - 1):
        raise ValueError(f"align must be a positive power of two, got {align}")
    raw, pad = _allocate(nbytes, align)
    return raw[pad : pad + nbytes]


def _allocate(nbytes: int, align: int) -> tuple[np.ndarray, int]:
    raw = np.empty(nbytes + align, dtype=np.uint8)
    return raw, (-buffer_address(raw)) % align


def _capacity_for(nbytes: int) -> int:
    cap = _MIN_CAPACITY
    while cap < nbytes:
        cap *= 2
    return cap


class HostBufferPool:
    """A thread-safe pool of aligned host buffers, one per window read.

    Args:
        align: alignment of every buffer's address (bytes, power of two).
        max_cached: how many idle-able buffers the pool keeps; when all of them
            are still referenced by callers, :meth:`acquire` allocates a fresh,
            uncached buffer instead of waiting (correct, just not recycled).

    Buffers have power-of-two capacities (>= 64 KiB), so windows of similar
    size reuse the same buffer; the most recently used idle buffer that fits
    is preferred. A buffer is reused only
    when nothing but the pool references it.
    """

    def __init__(self, *, align: int = PAGE, max_cached: int = 8) -> None:
        if max_cached < 0:
            raise ValueError(f"max_cached must be >= 0, got {max_cached}")
        self.align = align
        self.max_cached = max_cached
        # Owning allocations and the pad to their first aligned byte. Every view
        # handed out has one of these as its numpy ``.base``.
        self._raw: list[np.ndarray] = []
        self._pad: list[int] = []
        self._lock = threading.Lock()
        self.allocations = 0  # how many buffers were ever allocated (for tests/benchmarks)

    def _idle(self, i: int) -> bool:
        # References: the list slot, getrefcount's argument. Any caller view adds more.
        return sys.getrefcount(self._raw[i]) <= 2

    def _capacity(self, i: int) -> int:
        return self._raw[i].size - self.align

    def acquire(self, nbytes: int) -> np.ndarray:
        """An aligned ``uint8`` array of exactly ``nbytes`` (a view of a pooled buffer).

        The view stays valid as long as the caller holds it or any view derived
        from it; the pool will not hand the same memory out meanwhile.
        """
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
        with self._lock:
            i = self._pick(nbytes)
            if i >= 0:
                raw, pad = self._raw.pop(i), self._pad.pop(i)
                self._raw.insert(0, raw)  # most recently used first
                self._pad.insert(0, pad)
                return raw[pad : pad + nbytes]
            raw, pad = _allocate(_capacity_for(nbytes), self.align)
            self.allocations += 1
            if len(self._raw) < self.max_cached:
                self._raw.insert(0, raw)
                self._pad.insert(0, pad)
            else:
                self._replace_idle(raw, pad)
            return raw[pad : pad + nbytes]

    def _pick(self, nbytes: int) -> int:
        """The most recently used idle buffer that fits without wasting more than 4x
        (it is likely still in the CPU cache), else the smallest idle one that fits."""
        smallest = -1
        for i in range(len(self._raw)):
            cap = self._capacity(i)
            if cap < nbytes or not self._idle(i):
                continue
            if cap <= max(4 * nbytes, _MIN_CAPACITY):
                return i
            if smallest < 0 or cap < self._capacity(smallest):
                smallest = i
        return smallest

    def _replace_idle(self, raw: np.ndarray, pad: int) -> None:
        # Swap the smallest idle buffer for the bigger new one so the pool adapts.
        idle = [i for i in range(len(self._raw)) if self._idle(i)]
        if idle:
            smallest = min(idle, key=self._capacity)
            if self._raw[smallest].size < raw.size:
                self._raw[smallest] = raw
                self._pad[smallest] = pad

    def cached_bytes(self) -> int:
        """Bytes held by the pool's cached buffers."""
        with self._lock:
            return sum(self._capacity(i) for i in range(len(self._raw)))

    def clear(self) -> None:
        """Forget every cached buffer (views callers hold stay valid)."""
        with self._lock:
            self._raw.clear()
            self._pad.clear()
