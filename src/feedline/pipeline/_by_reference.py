"""Pickle a process worker's job context (and its results back) with file-backed arrays
sent by reference and small tensors by value.

A dataset that holds an ``np.memmap`` (nanoGPT's ``train.bin`` of uint16 tokens, a
``.npy`` opened with ``mmap_mode="r"``) pickles by default as its bytes: each process
worker would receive, and keep in its own memory, a copy of the whole file (17 GB for
OpenWebText, per worker). A worker's context goes wrapped in :class:`ByReference`, so
that :func:`dumps` runs inside ``Process.start`` (multiprocessing's queues and locks in a
transform pickle only there) with multiprocessing's own reducers; it sends such an array as its file name, byte
offset, dtype, shape and strides instead; the worker maps the same bytes of the same
file again (:func:`_remap`), read-only when the original was. An array whose data
lives in memory (a memmap's arithmetic result, a closed or negative-stride view) is
pickled as usual. A torch CPU storage under :data:`SHARE_FROM` bytes goes by value (a
list of many small tensors would otherwise take a file descriptor each), a larger one
in shared memory as torch's reducer sends it. A worker's results (ragged fields, a
custom collate's batch) go back through the same :func:`dumps`: a collate that returns
thousands of small tensors took a descriptor each there too, and a ``.conj()`` view
arrived unconjugated.
"""

from __future__ import annotations

import io
import mmap
import pickle
import sys
from multiprocessing.reduction import ForkingPickler
from typing import Any, Literal

import numpy as np

from feedline.pipeline.result_buffers import Reader, Segments, persistent_id


class _Pickler(ForkingPickler):
    """multiprocessing's pickler (queues, locks and pipes pickle while a worker starts), with
    file-backed memmaps reduced to references."""

    def __init__(self, *args: Any, memmaps: bool = True, segments: Segments | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.memmaps = memmaps
        self.segments = segments
        """A worker's reused shared memory for big result buffers (:mod:`.result_buffers`)."""
        """Whether file-backed memmaps go by reference (the job context) or by value (results)."""
        self.storage_bytes: dict[tuple[int, int], np.ndarray] = {}
        """Each small storage's bytes, one array per storage (see _reduce_small_storage)."""

    def persistent_id(self, obj: Any) -> Any:
        return None if self.segments is None else persistent_id(self.segments, obj)

    def reducer_override(self, obj: Any) -> Any:
        if self.memmaps and isinstance(obj, np.memmap):
            reduced = _reduce_memmap(obj)
            if reduced is not None:
                return reduced
        torch = sys.modules.get("torch")
        if torch is not None and type(obj) is torch.Tensor:
            return _reduce_small_tensor(torch, obj, self.storage_bytes)
        if torch is not None and isinstance(obj, (torch.UntypedStorage, torch.TypedStorage)):
            return _reduce_small_storage(torch, obj, self.storage_bytes)
        return NotImplemented


SHARE_FROM = 1 << 20
"""A CPU torch storage of at least this many bytes goes to the workers in shared memory
(torch's own reducer: one file descriptor each, no copy per worker); a smaller one by value."""


def _reduce_small_storage(torch: Any, storage: Any, seen: dict[tuple[int, int], np.ndarray]) -> Any:
    """A small CPU storage as its bytes (numpy's pickle: one buffer, no per-storage
    ``torch.save``), else ``NotImplemented`` (torch's shared-memory reducer).

    Every tensor's storage arrives as a new wrapper object; ``seen`` gives the views of
    one storage the same bytes array, which pickle then writes once (and the views share
    it again in the worker) instead of once per view.

    torch's reducer gives every storage its own shared-memory file descriptor: a dataset
    holding a list of 20,000 tokenised sentences as tensors could not start its process
    workers ("Too many open files"), where a DataLoader (fork) shares them for free."""
    typed = isinstance(storage, torch.TypedStorage)
    raw = storage._untyped_storage if typed else storage  # (TypedStorage's own API warns)
    if raw.device.type != "cpu" or raw.nbytes() >= SHARE_FROM:
        return NotImplemented
    key = (raw.data_ptr(), raw.nbytes())
    data = seen.get(key)
    if data is None:
        data = seen[key] = torch.empty(0, dtype=torch.uint8).set_(raw).numpy().copy()
    return _storage_from_bytes, (data, storage._dtype if typed else None)


def _reduce_small_tensor(torch: Any, t: Any, seen: dict[tuple[int, int], np.ndarray]) -> Any:
    """A plain dense CPU tensor on a small storage as that storage's bytes and its view
    (dtype, offset, size, stride): the same as torch's reducer followed by
    :func:`_reduce_small_storage`, without its per-tensor overhead (half the time of
    pickling 20,000 sentences). A conjugate or negative view goes as its values (torch's
    reducer drops those bits: a ``.conj()`` arrived unconjugated). Anything else
    (autograd, sparse, quantized, another device, a big storage) is left to torch."""
    if (t.device.type != "cpu" or t.layout != torch.strided or t.requires_grad
            or t.is_quantized):
        return NotImplemented
    resolved = t.is_conj() or t.is_neg()
    if resolved:
        # a new tensor: its storage is freed after this call, so no memo entry (its
        # address could come back for another one)
        t, seen = t.resolve_conj().resolve_neg(), {}
    reduced = _reduce_small_storage(torch, t.untyped_storage(), seen)
    if reduced is NotImplemented:
        # a big storage: torch's reducer, given the values (not the view, whose bit it drops)
        return (_same, (t,)) if resolved else NotImplemented
    data = reduced[1][0]
    return _tensor_from_bytes, (data, t.dtype, t.storage_offset(), tuple(t.shape), t.stride())


def _same(obj: Any) -> Any:
    return obj


def _tensor_from_bytes(data: np.ndarray, dtype: Any, offset: int, size: tuple[int, ...],
                       stride: tuple[int, ...]) -> Any:
    import torch

    raw = torch.from_numpy(data).untyped_storage()
    return torch.empty(0, dtype=dtype).set_(raw, offset, size, stride)


def _storage_from_bytes(data: np.ndarray, dtype: Any) -> Any:
    import torch

    raw = torch.from_numpy(data).untyped_storage()
    return raw if dtype is None else torch.TypedStorage(wrap_storage=raw, dtype=dtype, _internal=True)


def dumps(obj: Any, *, memmaps: bool = True, segments: Segments | None = None) -> bytes:
    """``pickle.dumps(obj)`` with small tensors by value and, with ``memmaps``, every
    file-backed ``np.memmap`` in it sent by reference. A worker's results pass
    ``memmaps=False``: a sample that is a slice of a copy-on-write map, changed in place by a
    transform, must arrive as its values, not as the file's bytes mapped again; and their
    ``segments``: big buffers copied into the worker's reused shared memory, read back by
    :func:`loads` (a failed dump frees the segments it took)."""
    buf = io.BytesIO()
    if segments is not None:
        segments.taken.clear()
    try:
        _Pickler(buf, pickle.HIGHEST_PROTOCOL, memmaps=memmaps, segments=segments).dump(obj)
    except BaseException:
        if segments is not None:
            segments.free(segments.taken)
        raise
    return buf.getvalue()


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes, reader: Reader) -> None:
        super().__init__(io.BytesIO(data))
        self.reader = reader

    def persistent_load(self, pid: Any) -> Any:
        return self.reader.load(pid)


def loads(data: bytes, reader: Reader) -> Any:
    """Unpickle what :func:`dumps` wrote with a worker's segments (``reader`` copies each
    out and lists it to free)."""
    return _Unpickler(data, reader).load()


class ByReference:
    """``obj``, pickled by :func:`dumps` when it is pickled (the argument of a worker
    process: inside ``Process.start``, where multiprocessing objects may be pickled), and
    ``obj`` itself again when unpickled."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        return pickle.loads, (dumps(self.obj),)


def _reduce_memmap(a: np.memmap) -> tuple[Any, tuple[Any, ...]] | None:
    mm = getattr(a, "_mmap", None)
    if a.filename is None or mm is None or a.size == 0 or any(s < 0 for s in a.strides):
        return None
    try:
        start = np.frombuffer(mm, np.uint8).ctypes.data
    except (ValueError, TypeError):  # a closed map
        return None
    mapped_from = a.offset - a.offset % mmap.ALLOCATIONGRANULARITY  # as np.memmap maps it
    first = mapped_from + a.ctypes.data - start
    nbytes = sum((n - 1) * s for n, s in zip(a.shape, a.strides, strict=True)) + a.itemsize
    mode = {"w+": "r+", "write": "r+"}.get(a.mode, a.mode)  # never truncate the file again
    return _remap, (a.filename, first, nbytes, a.dtype.str, a.shape, a.strides, mode)


def _remap(filename: str, first: int, nbytes: int, dtype: str, shape: tuple[int, ...],
           strides: tuple[int, ...], mode: Literal["r", "r+", "c"]) -> np.ndarray:
    """The array :func:`_reduce_memmap` described, mapped from its file in this process."""
    raw = np.memmap(filename, dtype=np.uint8, mode=mode, offset=first, shape=(nbytes,))
    return np.ndarray(shape, np.dtype(dtype), buffer=raw, strides=strides)
