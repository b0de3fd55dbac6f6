"""Reading fixed-size fields of a batch straight into the caller's rows, and label gathers.

:meth:`PackedDataset.read_fields_into` is the loader's path for fields whose
every value has the same size: field ``f`` of sample ``indices[i]`` lands in
row ``i`` of ``out[f]``, a batch slot. Raw fields are copied as stored; ``npy``
fields (see :class:`feedline.format.FieldSchema`) as their payload, from the
offset the index recorded at pack time, so the ``.npy`` header is never read
or parsed. The buffered reader does it with one ``pread`` per sample and field
into the row itself: no window buffer, view, dict, decode or stacking copy.
Other host readers (O_DIRECT needs aligned offsets, object stores want
coalesced ranges) read the batch's windows as :meth:`~PackedDataset.read_many`
does and copy each field into its row. Either way a sample that lacks a field,
or whose field has another size, is an error naming shard, key and field, and
nothing is guessed. With ``verify`` the checksum covers the whole member
(for ``npy``, the header bytes are read too).

:meth:`PackedDataset.gather_labels` fills ``label`` fields from the int64
column of the index: one numpy gather, no read, no parse;
:meth:`PackedDataset.gather_columns` does the same for every field the index holds
as a column (labels, and ``raw`` / ``npy`` values of at most 64 bytes a sample).

:meth:`PackedDataset.read_fields` reads only some fields of a batch, of any size
(the JPEGs of ``jpg + cls``, which the loader decodes straight into slot rows):
with the buffered reader, one ``pread`` per sample and field into one pooled
buffer for the batch, with no window planning and no per-sample dict; other
readers (and ``verify``) go through ``read_many``.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from feedline.errors import ChecksumError, ConfigError, ReadError
from feedline.format import FieldSchema
from feedline.format._checksum import hasher
from feedline.io._window import TRUNC_FIX, verify_part

_FIX = "read samples whose fields vary in size with read_many"
_preadv = os.preadv


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


def _spans(index: Any, field: str, samples: np.ndarray, npy: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(member rows, bytes skipped before the row's data, row data sizes)`` of ``field``.

    ``npy``: skip each member's ``.npy`` header (its payload offset from the index).
    Rows are ``-1`` for samples without the field.
    """
    rows = index.field_rows(field)[samples]
    sizes = index.members["size"][rows].astype(np.int64)
    skips = index.aux[rows] if npy else np.zeros(len(rows), dtype=np.int64)
    return rows, skips, sizes - skips


def _first_misfit(rows: np.ndarray, sizes: np.ndarray, nb: int) -> int | None:
    bad = (rows < 0) | (sizes != nb)
    return int(np.argmax(bad)) if bad.any() else None


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
    schema: Mapping[str, FieldSchema] = opened.catalog.schema
    npy = {f: f in schema and schema[f].kind == "npy" for f in flats}
    if reader.name != "buffered":
        return _copy_rows(opened, idx, flats, npy, read_many, algo)
    keys: list[str] = [""] * len(idx)
    pos, local = opened.catalog.locate(idx)
    for shard_pos in dict.fromkeys(pos.tolist()):
        where = np.flatnonzero(pos == shard_pos)
        state = opened.states[shard_pos]
        samples = local[where]
        names = state.entry.index.keys
        at = where.tolist()
        for p, s in zip(at, samples.tolist(), strict=True):
            keys[p] = names[s]
        for field, (flat, nb) in flats.items():
            _pread_field(opened, state, field, samples, at, keys, flat, nb, npy[field], algo)
    return keys


def _pread_field(opened: Any, state: Any, field: str, samples: np.ndarray, at: list[int], keys: list[str],
                 flat: memoryview, nb: int, npy: bool, algo: str | None) -> None:
    """One shard's samples of one field, one ``pread`` each straight into its row."""
    reader, index, shard = opened.reader, state.entry.index, state.entry.name
    rows, skips, sizes = _spans(index, field, samples, npy)
    j = _first_misfit(rows, sizes, nb)
    if j is not None:
        raise _misfit(shard, keys[at[j]], field, None if rows[j] < 0 else int(sizes[j]), nb)
    with state.lease() as handle:
        offsets = (index.members["offset"][rows].astype(np.int64) + skips).tolist()
        read_into = reader.read_into
        for p, off in zip(at, offsets, strict=True):
            if read_into(handle, off, flat[p * nb : p * nb + nb]) != nb:
                raise ReadError(f"shard ended inside a member that needs bytes up to {off + nb}",
                                shard=shard, key=keys[p], field=field, fix=TRUNC_FIX)
        if algo is None:
            return
        sums = index.members["checksum"][rows].tolist()
        for p, want, skip, off in zip(at, sums, skips.tolist(), offsets, strict=True):
            row = flat[p * nb : p * nb + nb]
            if not skip:
                verify_part(row, want, algo, shard, keys[p], field)
                continue
            head = bytearray(skip)  # the .npy header: read only to check the whole member
            if read_into(handle, off - skip, head) != skip:
                raise ReadError("shard ended inside a member's .npy header", shard=shard, key=keys[p],
                                field=field, fix=TRUNC_FIX)
            _verify_pieces((head, row), want, algo, shard, keys[p], field)


def _verify_pieces(pieces: tuple[Any, ...], want: int, algo: str, shard: str, key: str, field: str) -> None:
    h = hasher(algo)
    for piece in pieces:
        h.update(piece)
    if h.intdigest() != want:
        raise ChecksumError("field bytes do not match their checksum", shard=shard, key=key, field=field,
                            fix="the shard is corrupt: re-copy it and run `feedline verify`")


def _copy_rows(opened: Any, idx: np.ndarray, flats: dict[str, tuple[memoryview, int]], npy: dict[str, bool],
               read_many: Callable[[np.ndarray], list[dict[str, Any]]], algo: str | None) -> list[str]:
    """Read the batch's windows as ``read_many`` does (which verifies whole members when
    asked), then copy each field's data (an npy payload past its header) into its row."""
    del algo  # read_many already checked every member it read
    catalog = opened.catalog
    pos, local = catalog.locate(idx)
    keys = []
    for p, sample in enumerate(read_many(idx)):
        keys.append(str(sample["__key__"]))
        index = catalog.shards[int(pos[p])].index
        for field, (flat, nb) in flats.items():
            value: Any = sample.get(field)
            view = None if value is None else memoryview(value).cast("B")
            skip = 0
            if view is not None and npy[field]:
                skip = int(index.aux[int(index.field_rows(field)[int(local[p])])])
            size = None if view is None else view.nbytes - skip
            if size != nb or view is None:
                raise _misfit(catalog.shards[int(pos[p])].name, keys[-1], field, size, nb)
            flat[p * nb : p * nb + nb] = view[skip:]
    return keys


def gather_labels(catalog: Any, idx: np.ndarray, out: Mapping[str, Any]) -> None:
    """Fill ``out[f][i]`` with label field ``f`` of sample ``idx[i]`` (see
    :meth:`PackedDataset.gather_labels`)."""
    for name, dst in out.items():
        info = catalog.schema.get(name)
        if info is None or info.kind != "label":
            kind = "absent" if info is None else info.kind
            raise ConfigError(
                f"gather_labels: field {name!r} is not an integer label field (its kind is {kind})",
                field=name,
                fix="gather only fields whose dataset.schema kind is 'label'; read others with read_many",
            )
        _take_into(name, catalog.label_column(name), idx, dst, "an int64")



def _take_into(name: str, column: np.ndarray, idx: np.ndarray, dst: Any, dtype_words: str) -> None:
    """``dst[i] = column[idx[i]]``: one numpy gather into the caller's array, checked first."""
    want = (len(idx), *column.shape[1:])
    if not isinstance(dst, np.ndarray) or dst.dtype != column.dtype or dst.shape != want:
        raise ConfigError(f"out[{name!r}] must be {dtype_words} numpy array of shape {want}", field=name)
    if not dst.flags.writeable:
        raise ConfigError(f"out[{name!r}] must be writable", field=name)
    np.take(column, idx, axis=0, out=dst)


def gather_columns(catalog: Any, idx: np.ndarray, out: Mapping[str, Any]) -> None:
    """Fill ``out[f][i]`` with column field ``f`` of sample ``idx[i]`` (see
    :meth:`PackedDataset.gather_columns`)."""
    for name, dst in out.items():
        try:
            column = catalog.column(name)
        except KeyError:
            info = catalog.schema.get(name)
            kind = "absent" if info is None else info.kind if info.kind != "raw" and info.kind != "npy" \
                else f"{info.kind}, {info.nbytes} bytes a sample"
            raise ConfigError(
                f"gather_columns: field {name!r} is not a column of the index (its kind: {kind})",
                field=name,
                fix="gather only fields whose dataset.schema has column=True or kind 'label'; read others "
                    "with read_fields_into or read_many",
            ) from None
        _take_into(name, column, idx, dst, f"a {column.dtype}")


Views = dict[str, list[Any]]
"""Field -> one zero-copy byte view per sample (``None`` where the sample lacks it)."""


def read_members(opened: Any, idx: np.ndarray, fields: Sequence[str], algo: str | None,
                 read_many: Callable[[np.ndarray], list[dict[str, Any]]]) -> tuple[list[str], Views]:
    """The keys of samples ``idx`` and their ``fields`` as byte views (see
    :meth:`PackedDataset.read_fields`)."""
    if opened.reader.name != "buffered" or algo is not None:
        samples = read_many(idx)  # windows for O_DIRECT / object stores; verifies members
        return ([str(s["__key__"]) for s in samples],
                {f: [s.get(f) for s in samples] for f in fields})
    # Few numpy calls, the rest on Python lists: in a loader this runs right after a decode
    # has flushed the CPU caches, where each numpy call costs several microseconds (W1, 16
    # JPEGs a call, measured between decodes: 34 us a sample with a numpy call per column,
    # the shard lookup and the file order; the pread itself is 13)
    catalog, states = opened.catalog, opened.states
    order, first = idx.tolist(), catalog.first_of_shard
    at = [bisect_right(first, i) - 1 for i in order]  # what catalog.locate gives
    keys = [states[p].entry.index.keys[i - first[p]] for p, i in zip(at, order, strict=True)]
    spans = [(f, catalog.member_spans(f)[idx].tolist()) for f in fields]
    views: Views = {f: [None] * len(order) for f in fields}
    total = sum(size for _, rows in spans for _, size in rows if size > 0)
    buf, used = memoryview(opened.pool.acquire(total)), 0
    reader = opened.reader
    for shard_pos, run in _shard_runs(order, at):  # in file order: shard by shard, by offset
        state = states[shard_pos]
        handle = state.hold()
        try:
            for field, rows in spans:
                column = views[field]
                for p in run:
                    offset, size = rows[p]
                    if size < 0:
                        continue
                    view = buf[used : used + size]
                    try:  # the buffered reader's one call (its read_into finishes a short read)
                        got = _preadv(handle, [view], offset)
                    except OSError as e:
                        raise ReadError(f"read of {size} bytes at {offset} failed: {e.strerror}",
                                        shard=state.entry.name, key=keys[p], field=field) from e
                    if got != size and got + reader.read_into(handle, offset + got, view[got:]) != size:
                        raise ReadError(f"shard ended inside a member that needs bytes up to "
                                        f"{offset + size}", shard=state.entry.name, key=keys[p],
                                        field=field, fix=TRUNC_FIX)
                    column[p] = view
                    used += size
        finally:
            state.unhold()
    return keys, views


def _shard_runs(order: list[int], pos: list[int]) -> list[tuple[int, list[int]]]:
    """The positions of ``order`` (global indices) grouped by shard (``pos``: each one's
    shard), in global index order, which is file order: one handle lease per shard, reads in
    ascending offsets."""
    runs: list[tuple[int, list[int]]] = []
    current = -1
    for p in sorted(range(len(order)), key=order.__getitem__):  # stable, as argsort's
        if pos[p] != current:
            current = pos[p]
            runs.append((current, []))
        runs[-1][1].append(p)
    return runs
