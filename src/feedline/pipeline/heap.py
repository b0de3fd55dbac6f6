"""Give the C heap's free pages back to the system after a one-off peak.

The first batch of a loader (the probe, :func:`feedline.pipeline.plan.probe_batch`)
is decoded per sample into fresh arrays before the layout is known, then copied
into a slot; later batches are decoded straight into slots. glibc keeps the
probe's freed arrays in the worker thread's heap (a few small allocations made
after them pin the heap's top), so about one batch of memory stayed resident
for the whole run: 13 MB of W1's 64 x 256x256x3 JPEG batch. :func:`trim` asks
glibc (``malloc_trim(0)``) to release every free page now. Elsewhere (musl,
macOS) it does nothing. This module does not import torch (process workers
use it).
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:  # the C library the interpreter is linked with (no ldconfig lookup)
        fn = ctypes.CDLL(None).malloc_trim  # glibc only
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return fn


def trim() -> bool:
    """Release the C heap's free pages to the system; True when the C library can."""
    fn = _malloc_trim()
    if fn is None:
        return False
    fn(0)
    return True
