"""Reading fixed-size fields of a batch straight into the caller's rows.

:meth:`PackedDataset.read_fields_into` is the loader's path for fields whose
every value has the same size (raw tensors): field ``f`` of sample
``indices[i]`` lands in row ``i`` of ``out[f]``, a batch slot. The buffered
reader does it with one ``pread`` per sample and field into the row itself:
no window buffer, view, dict, decode or stacking copy. Other host readers
(O_DIRECT needs aligned offsets, object stores want coalesced ranges) read the
batch's windows as :meth:`~PackedDataset.read_many` does and copy each field
into its row. Either way a sample that lacks a field, or whose field has
another size, is an error naming shard, key and field, and nothing is
guessed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from feedline.errors import ConfigError, ReadError
from feedline.io._window import TRUNC_FIX, verify_part

_FIX = "read samples whose fields vary in size with read_many"


def _rows(out: Mapping[str, Any], n: int) -> dict[str, tuple[memoryview, int]]:
    """Field -> (flat writable byte view of its array, bytes per row)."""
    flats = {}
    for name, dst in out.items():
        if not isinstance(dst, np.ndarray) or not dst.flags.c_contiguous or not dst.flags.writeable:
            raise ConfigError(f"out[{name!r}] must be a writable C-contiguous numpy array")
        if dst.ndim < 1 or dst.shape[0] != n or (n and dst.nbytes % n):
            raise ConfigError(f"out[{name!r}] has shape {dst.shape}; it needs one row per index ({n})")
        flats[name] = (dst.reshape(-1).view(np.uint8).data, dst.nbytes // n if n else 0)
    return flats


def _misfit(shard: str, key: str, field: str, size: int | None, want: int) -> ReadError:
    what = "has no such field" if size is None else f"has {size} bytes in it"
    return ReadError(f"sample {what}; its row holds {want}", shard=shard, key=key, field=field, fix=_FIX)


def read_columns(opened: Any, idx: np.ndarray, out: Mapping[str, Any], algo: str | None,
                 read_many: Callable[[np.ndarray], list[dict[str, Any]]]) -> list[str]:
    """Fill ``out`` (see :meth:`PackedDataset.read_fields_into`); return the samples' keys.

    ``opened`` is the dataset's opened state, ``idx`` range-checked global indices,
    ``algo`` the checksum algorithm when verifying, ``read_many`` the dataset's
    general batched read (used by readers that cannot read into single rows).
    """
    reader = opened.reader
    if reader.device != "cpu":
        raise ConfigError(
            f"read_fields_into fills host arrays; the {reader.name} backend reads into device memory",
            fix="open the dataset with io='buffered' or io='direct'",
        )
    flats = _rows(out, len(idx))
    if not len(idx):
        return []
    if reader.name != "buffered":
        return _copy_rows(opened, idx, flats, read_many)
    read_into = reader.read_into
    keys: list[str] = [""] * len(idx)
    pos, local = opened.catalog.locate(idx)
    for shard_pos in dict.fromkeys(pos.tolist()):
        where = np.flatnonzero(pos == shard_pos)
        state = opened.states[shard_pos]
        index = state.entry.index
        samples = local[where]
        names = index.keys
        at = where.tolist()
        for p, s in zip(at, samples.tolist(), strict=True):
            keys[p] = names[s]
        handle = state.handle(reader)
        for field, (flat, nb) in flats.items():
            rows = index.field_rows(field)[samples]
            sizes = index.members["size"][rows]
            bad = (rows < 0) | (sizes != nb)
            if bad.any():
                j = int(np.argmax(bad))
                size = None if rows[j] < 0 else int(sizes[j])
                raise _misfit(state.entry.name, keys[at[j]], field, size, nb)
            for p, off in zip(at, index.members["offset"][rows].tolist(), strict=True):
                if read_into(handle, off, flat[p * nb : p * nb + nb]) != nb:
                    raise ReadError(f"shard ended inside a member that needs bytes up to {off + nb}",
                                    shard=state.entry.name, key=keys[p], field=field, fix=TRUNC_FIX)
            if algo is not None:
                sums = index.members["checksum"][rows].tolist()
                for p, want in zip(at, sums, strict=True):
                    verify_part(flat[p * nb : p * nb + nb], want, algo, state.entry.name, keys[p], field)
    return keys


def _copy_rows(opened: Any, idx: np.ndarray, flats: dict[str, tuple[memoryview, int]],
               read_many: Callable[[np.ndarray], list[dict[str, Any]]]) -> list[str]:
    """Read the batch's windows as ``read_many`` does, then copy each field into its row."""
    keys = []
    for p, sample in enumerate(read_many(idx)):
        keys.append(str(sample["__key__"]))
        for field, (flat, nb) in flats.items():
            value: Any = sample.get(field)
            size = None if value is None else memoryview(value).nbytes
            if size != nb:
                shard = opened.catalog.shards[int(opened.catalog.locate(idx[p : p + 1])[0][0])].name
                raise _misfit(shard, keys[-1], field, size, nb)
            flat[p * nb : p * nb + nb] = memoryview(value).cast("B")
    return keys
