"""``feedline.pipeline.heap.trim``: the C heap's free pages go back to the system (glibc)."""

from __future__ import annotations

import platform

import numpy as np
import pytest

from feedline.pipeline import heap


def _rss_pages() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1])


@pytest.mark.timeout(30)
@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_trim_returns_a_freed_batch_of_arrays_to_the_system() -> None:
    """What the probe leaves: a batch of fresh decoded arrays, freed, under a few small
    allocations made after them (they keep glibc from shrinking the heap by itself)."""
    first = np.empty(200_000, np.uint8)
    del first  # the first large free raises glibc's mmap threshold: the next ones are heap
    arrays = [np.ones(196_608, np.uint8) for _ in range(64)]
    pins = [np.ones(300, np.uint8) for _ in range(4000)]  # small, after the arrays
    before = _rss_pages()
    del arrays
    heap.trim()
    assert heap.trim() is True
    freed_mb = (before - _rss_pages()) * 4096 / 2**20
    assert freed_mb > 6, f"only {freed_mb:.1f} MB went back"  # most of the 12 MB
    del pins
