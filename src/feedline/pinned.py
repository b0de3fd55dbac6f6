"""Page-locked host memory of the size asked, given back when the last view is gone.

``torch.empty(..., pin_memory=True)`` takes its blocks from torch's caching
host allocator, which rounds every block up to a power of two and keeps freed
blocks cached and locked: a 257 MiB checkpoint staging buffer locks 512 MiB, a
12.6 MB batch slot 16 MiB, and a released buffer stays locked until the
process ends. A ``pinned_budget`` would then bound the bytes asked, not the
bytes locked. :func:`pinned_empty` locks exactly the pages a tensor needs:
page-aligned host memory (numpy), registered with ``cudaHostRegister`` (as
PyTorch's own DCP stager does, ``torch.cuda._pin_memory_utils``) and
unregistered just before that memory is freed, when the last tensor viewing it
has been dropped. Registered memory is pinned for CUDA's purposes:
``tensor.is_pinned()`` is true and ``copy_(..., non_blocking=True)`` to a
device is an asynchronous DMA.

Where registration is refused (a platform without it, such as WSL), the buffer
comes from torch's allocator instead, with one warning saying so.

The CPU tests exercise the bookkeeping through :class:`Registrar` (exact
size, alignment, one unregister after the last view); ``tests/gpu`` checks the
real registration.
"""

from __future__ import annotations

import math
import threading
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from feedline.io._buffers import PAGE

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Registrar:
    """The two calls that lock and unlock host memory: ``register(ptr, nbytes) -> error code``
    (0 = locked) and ``unregister(ptr) -> error code``."""

    register: Callable[[int, int], int]
    unregister: Callable[[int], int]


def cuda_registrar() -> Registrar:
    """``cudaHostRegister`` / ``cudaHostUnregister`` through torch's bindings (initialises CUDA)."""
    import torch

    cudart = torch.cuda.cudart()
    return Registrar(register=lambda ptr, n: int(cudart.cudaHostRegister(ptr, n, 0)),
                     unregister=lambda ptr: int(cudart.cudaHostUnregister(ptr)))


_warned = threading.Event()


def pinned_empty(shape: tuple[int, ...], dtype: torch.dtype, *,
                 registrar: Registrar | None = None) -> torch.Tensor:
    """An uninitialised CPU tensor of ``shape`` and ``dtype`` in page-locked memory.

    Exactly ``ceil(nbytes / 4096)`` pages are locked (not the next power of
    two), starting on a page boundary; they are unlocked and freed when the
    tensor and every view of it are gone.

    Args:
        shape: the tensor's shape.
        dtype: its dtype.
        registrar: the lock/unlock calls (default: CUDA's, :func:`cuda_registrar`).
    """
    import torch

    nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    if nbytes == 0:
        return torch.empty(shape, dtype=dtype)  # nothing to copy, nothing to lock
    reg = registrar or cuda_registrar()
    size = -(-nbytes // PAGE) * PAGE
    base = np.empty(size + PAGE, dtype=np.uint8)  # room to start on a page boundary
    pad = (-base.ctypes.data) % PAGE
    pages = base[pad : pad + size]
    ptr = int(pages.ctypes.data)
    err = reg.register(ptr, size)
    if err != 0:
        if not _warned.is_set():
            _warned.set()
            warnings.warn(
                f"page-locking {size} bytes with cudaHostRegister failed (CUDA error {err}); pinned buffers "
                "come from torch's allocator instead, which rounds each one up to a power of two, so more "
                "memory is locked than pinned_budget says", RuntimeWarning, stacklevel=2)
        return torch.empty(shape, dtype=dtype, pin_memory=True)
    # A weakref callback on the base array runs at the start of its deallocation, before numpy
    # frees the memory: the pages are unlocked while still mapped. torch.from_numpy keeps `pages`
    # (and through it `base`) alive as long as any tensor views the storage.
    weakref.finalize(base, _unregister, reg, ptr)
    return torch.from_numpy(pages)[:nbytes].view(dtype).reshape(shape)


def _unregister(reg: Registrar, ptr: int) -> None:
    try:
        reg.unregister(ptr)
    except Exception:  # at interpreter exit CUDA may be gone; the memory is freed either way
        pass
