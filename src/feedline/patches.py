"""Random patches of N-D arrays: 3D volumes and their segmentation masks.

A scan of ``int16[D, 256, 256]`` whose depth ``D`` varies from subject to subject does
not batch; a model trains on fixed-size patches cropped at random, the same box in the
volume and its mask. :func:`random_crop` crops the last ``len(size)`` axes of one array
(zero-padding an axis shorter than the patch, centred as nnU-Net pads), and
:class:`PatchTransform` is the ``transform=`` that crops several fields of a sample with
one box, in the workers, so batches are dense::

    ds = feedline.open_dataset("data/scans")       # pack scans/ --key parallel: volumes/x.npy + masks/x.npy
    tf = patches.PatchTransform({"volumes.npy": "image", "masks.npy": "mask"}, size=(32, 96, 96),
                                foreground=0.33, mask="masks.npy", dtypes={"image": np.float32})
    loader = feedline.Loader(ds, batch_size=4, transform=tf)
    # batch: {"image": float32[4, 32, 96, 96], "mask": uint8[4, 32, 96, 96], "__key__": [...]}

Fields of an ``.npz`` are named ``npz/<member>`` (``{"npz/image": "image", "npz/mask": "mask"}``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from feedline.errors import ArgumentError, ConfigError

__all__ = ["PatchTransform", "random_box", "random_crop"]

_local = threading.local()


def _rng() -> np.random.Generator:
    gen = getattr(_local, "rng", None)
    if gen is None:
        gen = _local.rng = np.random.default_rng()  # each worker thread (and process) its own stream
    return gen


def _size(size: int | Sequence[int]) -> tuple[int, ...]:
    dims = (size,) if isinstance(size, (int, np.integer)) else tuple(size)
    if not dims or not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d > 0 for d in dims):
        raise ArgumentError(f"size must be positive ints, one per cropped axis, got {size!r}", field="size")
    return tuple(int(d) for d in dims)


def random_box(shape: Sequence[int], size: int | Sequence[int], rng: np.random.Generator | None = None,
               centre: Sequence[int] | None = None) -> tuple[int, ...]:
    """The start of a random ``size`` box in the last ``len(size)`` axes of ``shape``: each
    start is uniform over the positions that keep the box inside (0 where the axis is
    shorter than the box, which :func:`random_crop` pads). With ``centre`` (a voxel), the
    box holds that voxel, placed at random within it."""
    dims = _size(size)
    tail = tuple(shape)[-len(dims):]
    if len(tail) != len(dims):
        raise ArgumentError(f"a {len(dims)}-D patch of an array of shape {tuple(shape)}", field="size")
    rng = rng if rng is not None else _rng()
    start = []
    for i, (n, p) in enumerate(zip(tail, dims, strict=True)):
        hi = max(n - p, 0)
        if centre is None:
            start.append(int(rng.integers(0, hi + 1)))
        else:
            c = int(centre[i])
            start.append(int(rng.integers(max(c - p + 1, 0), min(c, hi) + 1)) if hi else 0)
    return tuple(start)


def random_crop(arr: np.ndarray, size: int | Sequence[int], rng: np.random.Generator | None = None,
                start: Sequence[int] | None = None, pad_value: float = 0) -> np.ndarray:
    """A ``size`` patch of the last ``len(size)`` axes of ``arr`` (leading axes, such as
    channels, kept whole) at ``start`` (a :func:`random_box` when None).

    An axis shorter than the patch is padded with ``pad_value`` on both sides, so every
    patch has the shape asked. The result is a copy (contiguous, the input's dtype).
    """
    dims = _size(size)
    arr = np.asarray(arr)
    if arr.ndim < len(dims):
        raise ArgumentError(f"a {len(dims)}-D patch of an array of shape {arr.shape}", field="size")
    if start is None:
        start = random_box(arr.shape, dims, rng)
    lead = arr.ndim - len(dims)
    tail = arr.shape[lead:]
    src = tuple(slice(s, s + p) for s, p in zip(start, dims, strict=True))
    patch = arr[(slice(None),) * lead + src]
    if patch.shape[lead:] == dims:
        return np.ascontiguousarray(patch)
    out = np.full(arr.shape[:lead] + dims, pad_value, dtype=arr.dtype)
    dst = tuple(slice((p - n) // 2 if n < p else 0, ((p - n) // 2 if n < p else 0) + min(n, p))
                for n, p in zip(tail, dims, strict=True))
    out[(slice(None),) * lead + dst] = patch
    return out


class PatchTransform:
    """A ``transform=`` cropping the same random ``size`` box from every field of ``fields``.

    Args:
        fields: the fields to crop, with the name each patch goes out under
            (``{"volumes.npy": "image", "masks.npy": "mask"}``), or a list (names kept).
            ``npz/<member>`` crops a member of an ``.npz`` field. Every field's last
            ``len(size)`` axes must have the same shape (the first field's decides the box).
        size: the patch, one int per cropped axis (``(32, 96, 96)``).
        foreground: the fraction of patches centred on a nonzero voxel of ``mask`` (nnU-Net
            samples a third that way); 0 for uniform boxes only.
        mask: the field (of ``fields``) whose nonzero voxels ``foreground`` samples.
        patches: crops per sample; above 1 each output gets a leading axis of that size
            (batch ``[N, patches, ...]``: ``.flatten(0, 1)``), so one read of a large
            volume gives several patches.
        dtypes: output name -> numpy dtype to cast to (``{"image": np.float32}``).
        pad_value: what an axis shorter than the patch is padded with.
        rng: a generator for the boxes (tests); None: each worker thread its own,
            seeded by the OS, as :mod:`feedline.vision`'s random crops are.

    Other fields of the sample pass through; the cropped ones are replaced.

    Raises (when called):
        ConfigError: a field missing from the sample, or fields whose shapes disagree.
    """

    def __init__(self, fields: Mapping[str, str] | Sequence[str], size: int | Sequence[int], *,
                 foreground: float = 0.0, mask: str | None = None, patches: int = 1,
                 dtypes: Mapping[str, Any] | None = None, pad_value: float = 0,
                 rng: np.random.Generator | None = None) -> None:
        pairs = dict(fields) if isinstance(fields, Mapping) else {f: f for f in ([fields] if isinstance(fields, str)
                                                                                 else fields)}
        if not pairs:
            raise ArgumentError("PatchTransform: give at least one field", field="fields")
        self.fields = pairs
        self.size = _size(size)
        if not 0.0 <= float(foreground) <= 1.0:
            raise ArgumentError(f"foreground must be in [0, 1], got {foreground!r}", field="foreground")
        if foreground and mask not in pairs:
            raise ArgumentError(f"foreground={foreground} needs mask= naming one of {list(pairs)}, got {mask!r}",
                                field="mask")
        if not isinstance(patches, int) or isinstance(patches, bool) or patches < 1:
            raise ArgumentError(f"patches must be an int >= 1, got {patches!r}", field="patches")
        self.foreground, self.mask, self.patches = float(foreground), mask, patches
        self.dtypes = {k: np.dtype(v) for k, v in (dtypes or {}).items()}
        unknown = set(self.dtypes) - set(pairs.values())
        if unknown:
            raise ArgumentError(f"dtypes names {sorted(unknown)}, not an output of {list(pairs.values())}",
                                field="dtypes")
        self.pad_value = pad_value
        self.rng = rng

    def _arrays(self, sample: Mapping[str, Any]) -> dict[str, np.ndarray]:
        arrays = {}
        for name in self.fields:
            top, _, member = name.partition("/")
            value = sample.get(name, sample.get(top) if member else None)
            if member and isinstance(value, Mapping):
                value = value.get(member)
            if value is None:
                raise ConfigError(f"PatchTransform: sample {sample.get('__key__')!r} has no field {name!r} "
                                  f"(fields: {sorted(k for k in sample if not k.startswith('__'))})", field=name)
            arrays[name] = np.asarray(value)
        shapes = {n: a.shape[-len(self.size):] for n, a in arrays.items()}
        if len(set(shapes.values())) > 1:
            raise ConfigError(f"PatchTransform: sample {sample.get('__key__')!r}: the cropped axes differ "
                              f"between fields {shapes}", field=next(iter(arrays)))
        return arrays

    def _start(self, arrays: dict[str, np.ndarray], rng: np.random.Generator) -> tuple[int, ...]:
        shape = next(iter(arrays.values())).shape
        centre = None
        if self.foreground and rng.random() < self.foreground:
            m = arrays[self.mask]  # type: ignore[index]
            nz = np.flatnonzero(m.reshape(-1, *m.shape[-len(self.size):]).any(axis=0))
            if nz.size:
                centre = np.unravel_index(nz[rng.integers(nz.size)], m.shape[-len(self.size):])
        return random_box(shape, self.size, rng, centre)

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        rng = self.rng if self.rng is not None else _rng()
        arrays = self._arrays(sample)
        crops: dict[str, list[np.ndarray]] = {out: [] for out in self.fields.values()}
        for _ in range(self.patches):
            start = self._start(arrays, rng)
            for name, arr in arrays.items():
                out = self.fields[name]
                patch = random_crop(arr, self.size, start=start, pad_value=self.pad_value)
                crops[out].append(patch.astype(self.dtypes[out], copy=False) if out in self.dtypes else patch)
        result = {k: v for k, v in sample.items() if k not in self.fields}
        for name in self.fields:  # an .npz keeps its other members (spacing, age...)
            top, _, member = name.partition("/")
            if member and isinstance(result.get(top), Mapping):
                rest = {k: v for k, v in result[top].items() if f"{top}/{k}" not in self.fields}
                if rest:
                    result[top] = rest
                else:
                    del result[top]
        for out, parts in crops.items():
            result[out] = parts[0] if self.patches == 1 else np.stack(parts)
        return result

    def __repr__(self) -> str:
        return f"PatchTransform({self.fields!r}, size={self.size}, patches={self.patches})"
