"""Staging: one reused, budgeted, 4096-aligned buffer per checkpointer, and copies into it.

``save()`` copies every tensor into the staging buffer at its layout offset
and returns; the writer then writes straight from that buffer. The buffer is
kept between saves and only grows when a state does not fit, so saving every
N steps allocates nothing after the first save (:attr:`StagingArena.allocations`
counts), and :meth:`StagingArena.buffer` can touch a new buffer's pages ahead of
the first save (``prefault``), which is where a first save spends most of its
time (page faults; on a VM the hypervisor backs each new page). Host-to-host
copies are ``Tensor.copy_`` with the GIL released and run at memory bandwidth:
on the 2-core VM measured, a raw ``memcpy`` of the bytes and a copy split over
two threads were no faster (0.12 s per GiB each), so neither is done. Host
staging memory is page-locked (pinned) when the state has CUDA tensors, so the
device-to-host copies run at full bandwidth on a side stream;
for the ``gds`` writer the staging buffer is device memory.

Device copies run on side streams, one per CUDA device the state lives on
(:class:`CopyStreams`): PyTorch runs a copy from a CUDA tensor on the current
stream of *that tensor's* device, so one stream made on the current device
neither carries nor waits for the copies of a state on ``cuda:1``.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from feedline.checkpoint._layout import Layout, TensorEntry
from feedline.errors import ResourceError
from feedline.io._buffers import PAGE, aligned_empty


def bytes_view(buf: Any, entry: TensorEntry) -> Any:
    """``entry``'s bytes in ``buf`` (a numpy or torch ``uint8`` buffer), shaped as its tensor.

    A numpy buffer gives a numpy array for ``numpy`` entries and a CPU tensor
    sharing the memory for ``torch`` entries; a torch buffer gives a tensor.

    Raises:
        ValueError: dtype, shape and byte count disagree (a damaged or hostile
            header), or the dtype is not one a save writes.
    """
    raw = buf[entry.offset : entry.offset + entry.nbytes]
    if entry.kind == "numpy":
        if not isinstance(raw, np.ndarray):
            raw = raw.cpu().numpy()
        np_dtype = np.dtype(entry.dtype)
        if np_dtype.hasobject or np_dtype.fields is not None:
            raise ValueError(f"dtype {entry.dtype!r} holds Python objects or fields")
        _check_size(entry, np_dtype.itemsize)
        return raw.view(np_dtype).reshape(entry.shape)
    import torch

    same = _NUMPY_TWIN.get(entry.dtype)
    if same is not None and isinstance(raw, np.ndarray):  # numpy's view and reshape: ~3x faster than torch's
        _check_size(entry, same.itemsize)
        return torch.from_numpy(raw.view(same).reshape(entry.shape))
    t = torch.from_numpy(raw) if isinstance(raw, np.ndarray) else raw
    dtype = getattr(torch, entry.dtype, None)
    if not isinstance(dtype, torch.dtype) or entry.dtype.startswith(("qint", "quint")):
        raise ValueError(f"unknown torch dtype {entry.dtype!r}")
    _check_size(entry, dtype.itemsize)
    if entry.nbytes == 0:
        return torch.empty(entry.shape, dtype=dtype, device=t.device)
    return t.view(dtype).view(entry.shape)


_NUMPY_TWIN = {name: np.dtype(name) for name in (  # torch dtypes numpy has under the same name and layout
    "float16", "float32", "float64", "complex64", "complex128", "bool",
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")}


def _check_size(entry: TensorEntry, itemsize: int) -> None:
    # Checked before any view: a header saying 0 bytes and shape [10**12] would otherwise allocate.
    if math.prod(entry.shape) * itemsize != entry.nbytes:
        raise ValueError(f"shape {list(entry.shape)} of {itemsize}-byte items is not {entry.nbytes} bytes")


class StagingArena:
    """A budgeted staging buffer that is reused across saves.

    Args:
        budget: most bytes the buffer may hold (``None``: as large as a state needs).
        pinned: page-lock host memory (for CUDA states); needs torch.
        device: ``"cpu"`` for host staging, or a CUDA device for GDS writes.

    Raises:
        ResourceError: from :meth:`buffer`, when a state is larger than the budget.
    """

    def __init__(self, budget: int | None, *, pinned: bool = False, device: str = "cpu") -> None:
        self.budget = budget
        self.pinned = pinned
        self.device = device
        self.allocations = 0
        self._owner: Any = None
        self._buf: Any = None
        self._lock = threading.Lock()

    @property
    def capacity(self) -> int:
        """Bytes the current buffer holds (0 before the first save)."""
        return 0 if self._buf is None else int(self._buf.shape[0])

    def buffer(self, nbytes: int, *, prefault: bool = False) -> Any:
        """The staging buffer, at least ``nbytes`` long (grown, with 1/8 headroom, only when needed).

        ``prefault``: write one byte per page of a newly allocated host buffer,
        so the copies of the first save do not stop on page faults.
        """
        if self.budget is not None and nbytes > self.budget:
            raise ResourceError(
                f"the state needs {nbytes} bytes of staging but pinned_budget is {self.budget}",
                fix=f"pass pinned_budget >= {nbytes} (e.g. '{-(-nbytes // 2**20)}MiB') to Checkpointer",
                stage="checkpoint")
        with self._lock:
            if self._buf is None or self.capacity < nbytes:
                want = nbytes + nbytes // 8
                if self.budget is not None:
                    want = min(want, self.budget)
                self._buf = None
                self._owner = None
                self._allocate(max(want, PAGE))
                self.allocations += 1
                if prefault and isinstance(self._buf, np.ndarray) and not self.pinned:
                    self._buf[::PAGE] = 0  # pinned memory is already resident
            return self._buf

    def _allocate(self, nbytes: int) -> None:
        if self.device != "cpu":
            import torch

            raw = torch.empty(nbytes + PAGE, dtype=torch.uint8, device=self.device)
            pad = (-raw.data_ptr()) % PAGE
            self._owner, self._buf = raw, raw[pad : pad + nbytes]
        elif self.pinned:
            import torch

            from feedline.pinned import pinned_empty

            # exactly the pages asked, page-aligned, unlocked on release() (torch's pinned
            # allocator would lock the next power of two and keep it after release)
            raw = pinned_empty((nbytes,), torch.uint8)
            self._owner = raw
            self._buf = raw.numpy()
        else:
            self._buf = aligned_empty(nbytes)

    def release(self) -> None:
        """Drop the buffer (the next save allocates again)."""
        with self._lock:
            self._buf = None
            self._owner = None


class CopyStreams:
    """One side stream per CUDA device, made on first use and kept across saves.

    Args:
        make: ``fn(device) -> stream`` (default: ``torch.cuda.Stream(device=device)``).
    """

    def __init__(self, make: Callable[[Any], Any] | None = None) -> None:
        self._make = make or _side_stream
        self._streams: dict[Any, Any] = {}

    def on(self, device: Any) -> Any:
        """The side stream of ``device`` (a ``torch.device`` with its index)."""
        stream = self._streams.get(device)
        if stream is None:
            stream = self._streams[device] = self._make(device)
        return stream

    @property
    def devices(self) -> list[Any]:
        """The devices that have a side stream so far."""
        return list(self._streams)


def _side_stream(device: Any) -> Any:
    import torch

    return torch.cuda.Stream(device=device)


def stage_into(layout: Layout, buf: Any, *, streams: CopyStreams | None = None) -> None:
    """Copy every leaf of ``layout`` into ``buf`` at its offset; returns when the copies are done.

    A CUDA leaf is copied on the side stream of its own device (``streams``),
    made to wait for that device's current stream first, so pending kernels
    that write the tensor finish before the copy; before returning the call
    synchronises the side stream of every device copied from (without
    ``streams``: those devices), so the caller may change the tensors, and the
    writer read ``buf``, as soon as it returns.
    """
    copied: dict[Any, None] = {}  # the CUDA devices copied from, in order
    for i, (leaf, entry) in enumerate(zip(layout.leaves, layout.entries, strict=True)):
        if entry.nbytes == 0 or not layout.owns(i):  # a tensor reached twice is staged once
            continue
        if isinstance(leaf, np.ndarray):
            if isinstance(buf, np.ndarray):
                np.copyto(bytes_view(buf, entry), leaf)
            else:  # a device buffer (gds): copy the array's raw bytes
                raw = np.ascontiguousarray(leaf).reshape(-1).view(np.uint8)
                buf[entry.offset : entry.offset + entry.nbytes].copy_(_torch_from(raw))
            continue
        dst = copyable(bytes_view(buf, entry))
        if leaf.device.type == "cuda":
            first = leaf.device not in copied  # one wait per device covers every kernel queued before
            copied[leaf.device] = None
            with _on(None if streams is None else streams.on(leaf.device), leaf, wait=first):
                dst.copy_(copyable(leaf), non_blocking=True)
        else:
            dst.copy_(copyable(leaf))
    for device in copied:
        if streams is not None:
            streams.on(device).synchronize()
        else:
            import torch

            torch.cuda.synchronize(device)


def copyable(t: Any) -> Any:
    """``t``, or, for a dtype ``Tensor.copy_`` has no kernel for (the sub-byte shells ``torch.uint1``-``7``
    and ``int1``-``7``: "copy_kernel not implemented" from every save before), the same bytes viewed as
    the integer dtype of its item size, which copies them as they are (strides kept)."""
    ok = _COPIES.get(t.dtype)
    if ok is None:
        ok = _COPIES[t.dtype] = _has_copy(t.dtype)
    return t if ok else t.view(_INT_OF_SIZE[t.element_size()])


_COPIES: dict[Any, bool] = {}  # torch dtype -> whether Tensor.copy_ takes it (probed once, on the CPU)
_INT_OF_SIZE: dict[int, Any] = {}


def _has_copy(dtype: Any) -> bool:
    import torch

    if not _INT_OF_SIZE:
        _INT_OF_SIZE.update({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64})
    try:
        torch.zeros(dtype.itemsize, dtype=torch.uint8).view(dtype).copy_(
            torch.zeros(dtype.itemsize, dtype=torch.uint8).view(dtype))
    except (NotImplementedError, RuntimeError):
        return dtype.itemsize not in _INT_OF_SIZE  # no integer twin: let copy_ say what it says
    return True


def _torch_from(arr: np.ndarray) -> Any:
    import torch

    return torch.from_numpy(np.ascontiguousarray(arr))


class _on:
    """``with torch.cuda.stream(stream)``, after making it wait for the current stream of
    ``leaf``'s device when ``wait`` (``stream`` is on that device: the copy runs there)."""

    def __init__(self, stream: Any, leaf: Any, *, wait: bool = True) -> None:
        self.stream, self.leaf, self.wait = stream, leaf, wait
        self.ctx: Any = None

    def __enter__(self) -> None:
        if self.stream is None:
            return
        import torch

        if self.wait:
            self.stream.wait_stream(torch.cuda.current_stream(self.leaf.device))
        self.ctx = torch.cuda.stream(self.stream)
        self.ctx.__enter__()

    def __exit__(self, *exc: Any) -> None:
        if self.ctx is not None:
            self.ctx.__exit__(*exc)
