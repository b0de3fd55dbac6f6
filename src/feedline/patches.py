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

__all__ = ["PatchTransform", "Patches", "random_box", "random_crop"]

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
    return _placed(arr[(slice(None),) * lead + src], tail, dims, pad_value)


def _placed(patch: np.ndarray, tail: Sequence[int], dims: tuple[int, ...], pad_value: float) -> np.ndarray:
    """``patch`` (cut from axes of sizes ``tail``) as a contiguous ``dims`` patch: as it is when
    it has that shape, else centred in ``pad_value`` along each axis shorter than the patch."""
    lead = patch.ndim - len(dims)
    if patch.shape[lead:] == dims:
        return np.ascontiguousarray(patch)
    out = np.full(patch.shape[:lead] + dims, pad_value, dtype=patch.dtype)
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


class Patches:
    """A map-style dataset of random patches of ``.npy`` fields that reads only the patch's rows.

    Where :class:`PatchTransform` gets each sample's arrays whole (the Loader reads members
    whole), this reads the header of each ``.npy`` member once, then per patch only the
    rows the box covers (:meth:`feedline.io.PackedDataset.read_ranges`): a ``32 x 96 x 96``
    box of an ``int16[64, 256, 256]`` scan is 19 % of its bytes, as a ``DataLoader`` over
    ``np.load(path, mmap_mode="r")`` reads, and with ``io="direct"`` too::

        ds = feedline.open_dataset("data/scans", io="direct")
        loader = feedline.Loader(patches.Patches(ds, {"volumes.npy": "image", "masks.npy": "mask"},
                                                 size=(32, 96, 96), dtypes={"image": np.float32}),
                                 batch_size=4, workers=2, seed=0)

    Args:
        dataset: a packed dataset (or subset; a path opens one); sample ``i`` here is its ``i``.
        fields, size, patches, dtypes, pad_value, rng: as :class:`PatchTransform`; the fields
            are ``.npy`` fields (C order), cropped in their last ``len(size) >= 2`` axes.

    Boxes are uniform (``foreground=`` needs the whole mask: use :class:`PatchTransform`).
    Each item is ``{out name: patch, "__key__": key}``.

    Raises:
        ArgumentError: a field that is not ``.npy`` or a patch of fewer than 2 axes.
        ConfigError (reading): a Fortran-ordered or object ``.npy``, fields whose cropped
            axes differ.
    """

    def __init__(self, dataset: Any, fields: Mapping[str, str] | Sequence[str], size: int | Sequence[int], *,
                 patches: int = 1, dtypes: Mapping[str, Any] | None = None, pad_value: float = 0,
                 rng: np.random.Generator | None = None) -> None:
        if isinstance(dataset, (str, bytes)) or hasattr(dataset, "__fspath__"):
            from feedline.io import open_dataset

            dataset = open_dataset(dataset)
        self._spec = PatchTransform(fields, size, patches=patches, dtypes=dtypes, pad_value=pad_value, rng=rng)
        bad = [f for f in self._spec.fields if not f.endswith(".npy")]
        if bad:
            raise ArgumentError(f"Patches reads .npy fields by their rows; {bad} are not .npy",
                                field="fields", fix="crop other fields whole with transform=patches.PatchTransform")
        if len(self._spec.size) < 2:
            raise ArgumentError(f"Patches crops 2 or more axes, got size={size!r}", field="size",
                                fix="crop one axis with transform=patches.PatchTransform")
        self.dataset = dataset
        self._headers: dict[tuple[int, str], tuple[int, np.dtype, tuple[int, ...]]] = {}
        self._keys: list[str] | None = None

    def __len__(self) -> int:
        return len(self.dataset)

    def _header(self, i: int, field: str) -> tuple[int, np.dtype, tuple[int, ...]]:
        got = self._headers.get((i, field))
        if got is None:
            got = self._headers[(i, field)] = _npy_header(self.dataset, i, field)
        return got

    def __getitem__(self, i: int) -> dict[str, Any]:
        spec = self._spec
        rng = spec.rng if spec.rng is not None else _rng()
        heads = {f: self._header(i, f) for f in spec.fields}
        if self._keys is None:
            self._keys = list(self.dataset.keys())
        key = self._keys[i]
        tails = {f: h[2][-len(spec.size):] for f, h in heads.items()}
        if len(set(tails.values())) > 1 or any(len(h[2]) < len(spec.size) for h in heads.values()):
            raise ConfigError(f"Patches: sample {key!r}: the cropped axes differ between fields "
                              f"{ {f: h[2] for f, h in heads.items()} }", field=next(iter(heads)))
        crops: dict[str, list[np.ndarray]] = {out: [] for out in spec.fields.values()}
        for _ in range(spec.patches):
            start = random_box(next(iter(heads.values()))[2], spec.size, rng)
            for field, out in spec.fields.items():
                patch = self._read_box(i, field, heads[field], start)
                crops[out].append(patch.astype(spec.dtypes[out], copy=False) if out in spec.dtypes else patch)
        item: dict[str, Any] = {out: parts[0] if spec.patches == 1 else np.stack(parts)
                                for out, parts in crops.items()}
        item["__key__"] = key
        return item

    def _read_box(self, i: int, field: str, head: tuple[int, np.dtype, tuple[int, ...]],
                  start: tuple[int, ...]) -> np.ndarray:
        """The box at ``start`` of member ``field``: one contiguous band (the box's rows of
        the second-to-last axis, every column) per index of the axes before, then the
        columns cut in memory and short axes padded."""
        offset, dtype, shape = head
        dims, lead = self._spec.size, len(shape) - len(self._spec.size)
        tail = shape[lead:]
        ranges_per_axis = [range(n) for n in shape[:lead]] + [
            range(s, min(s + p, n)) for s, p, n in zip(start[:-2], dims[:-2], tail[:-2], strict=True)]
        y0, ny = start[-2], min(dims[-2], tail[-2])
        row = shape[-1] * dtype.itemsize
        rows_per = [int(np.prod(shape[k + 1:-1])) for k in range(len(shape) - 2)]  # rows per step of axis k
        bands = []
        for index in np.ndindex(*(len(r) for r in ranges_per_axis)):
            first = sum(r[k] * n for r, k, n in zip(ranges_per_axis, index, rows_per, strict=True))
            bands.append((offset + (first + y0) * row, ny * row))
        raw = self.dataset.read_ranges(i, field, bands)
        block = raw.view(dtype).reshape(*(len(r) for r in ranges_per_axis), ny, shape[-1])
        x0 = start[-1]
        block = block[..., x0:x0 + min(dims[-1], tail[-1])]
        return _placed(block, tail, dims, self._spec.pad_value)

    def __repr__(self) -> str:
        return f"Patches({self.dataset!r}, {self._spec.fields!r}, size={self._spec.size})"


def _npy_header(dataset: Any, i: int, field: str) -> tuple[int, np.dtype, tuple[int, ...]]:
    """(payload offset, dtype, shape) of the ``.npy`` member ``field`` of sample ``i``."""
    import io

    size = int(dataset.sizes(field)[i]) if hasattr(dataset, "sizes") else 4096
    head = dataset.read_ranges(i, field, [(0, min(size, 4096))]).tobytes()
    fp = io.BytesIO(head)
    try:
        version = np.lib.format.read_magic(fp)
        reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = reader(fp)
    except (ValueError, EOFError) as e:
        raise ConfigError(f"Patches: field {field!r} of sample {i} is not a .npy array with a header in its "
                          f"first 4096 bytes ({e})", field=field) from None
    if fortran or dtype.hasobject:
        raise ConfigError(f"Patches: field {field!r} of sample {i} is "
                          f"{'Fortran-ordered' if fortran else 'an object array'}", field=field,
                          fix="save C-ordered numeric arrays (numpy.save(np.ascontiguousarray(a)))")
    return fp.tell(), dtype, tuple(shape)
