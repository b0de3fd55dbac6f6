"""The field schema: which fields become fixed-size tensors with no per-sample Python.

Each field of a shard has one *kind*, decided when the shard is written (pack)
or adopted (``feedline index``) and stored in the index (format version 2; the
columns below since version 3):

``raw``
    a raw dtype extension (``f32``, ``u8``, ...) of the same size in every
    sample: the member's bytes are the row, as stored.
``npy``
    a ``.npy`` member whose header was parsed once: the same dtype and shape
    in every sample, C order; the payload offset inside each member is stored,
    so the payload is read straight into a batch row. An ``.npy`` that needs
    pickle (object dtype) is refused naming the member; one that is not a
    valid array (or Fortran-ordered, structured) makes its field ``var``.
``label``
    an integer label (``cls``, ``cls2``, ``index``, ``label``, ``idx``,
    ``target``, ``class`` and the same names with ``.txt``: ``label.txt``)
    whose every value is an ASCII integer that fits int64; the values form an
    int64 column of the index, so a batch's labels are a numpy gather.
    ``cls``/``cls2``/``index`` (decoded as integers by feedline's codecs) with a
    value that is not an integer are refused naming the member; the other
    label names may hold text labels, so such a field is ``var`` instead.
``var``
    everything else, and any field whose shape or dtype varies across samples
    or that some samples lack: read and decoded per sample.

A ``raw`` or ``npy`` field whose value is at most :data:`COLUMN_MAX_BYTES` (a
scalar, a small vector: ``rating.f32``, ``user.npy`` of shape ``()``, an ``xyz.f32``)
is also stored as a *column* of the index (format version 3, flag
:data:`COLUMN_FLAG` of its record): every sample's value bytes, as stored, in
sample order. A batch of such a field is then a numpy gather, with no read. The
bound keeps the index small: each column value sits beside the 38 bytes (member
record + ``aux``) the index holds for its member anyway, so columns make an index
at most (38 + 64) / 38 = 2.7x its size, and a field of larger values (an image, 200
features of an ``.npy``) stays where it is, read straight into batch rows.

Stored per shard as one :data:`FIELD_DTYPE` record per field plus one int64
``aux`` value per member (the npy payload offset, the label value, else 0),
then the columns. :func:`merge_schemas` gives the dataset's schema: a field
keeps its kind only if every shard agrees on kind, dtype and shape, and is a
column only if it is one in every shard.
"""

from __future__ import annotations

import ast
import functools
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np

from feedline.errors import ConfigError

Kind = Literal["raw", "npy", "label", "var"]
KINDS: tuple[Kind, ...] = ("raw", "npy", "label", "var")
MAX_NDIM = 8
DTYPE_CHARS = 12
FIELD_DTYPE = np.dtype(
    [("kind", "u1"), ("ndim", "u1"), ("flags", "<u2"), ("dtype", f"S{DTYPE_CHARS}"), ("shape", "<u8", (MAX_NDIM,))]
)
"""One field's schema in a shard index (little-endian, 80 bytes). ``flags`` (version 3;
0 before): :data:`COLUMN_FLAG`."""
COLUMN_FLAG = 1
"""``flags`` bit: the field's values are stored as a column of the index (version 3)."""
COLUMN_MAX_BYTES = 64
"""The largest value (bytes per sample) of a ``raw`` / ``npy`` field stored as a column."""

# The raw dtype extensions of the format (decode.codecs.RAW_DTYPES decodes the same names).
RAW_DTYPES: dict[str, str] = {
    "f16": "<f2", "f32": "<f4", "f64": "<f8",
    "i8": "i1", "i16": "<i2", "i32": "<i4", "i64": "<i8",
    "u8": "u1", "u16": "<u2", "u32": "<u4", "u64": "<u8",
}
STRICT_LABELS = frozenset({"cls", "cls2", "index"})
LABELS = STRICT_LABELS | {"label", "idx", "target", "class"}
_MAX_LABEL_BYTES = 64
_MAX_NPY_HEADER = 10_000  # numpy's own bound on header size
HEAD_BYTES = 16384
"""A member's first bytes hold everything its schema fact needs (npy header, label text)."""
_I64 = (-(1 << 63), (1 << 63) - 1)
_MAX_COLUMNS = (1 << 32) - 1  # _index.MAX_COLUMN_BYTES
_FIX_NPY = "save numeric arrays with numpy.save (no object dtype, no pickle), or exclude the file"


@dataclass(frozen=True)
class FieldSchema:
    """How a field's values look in every sample of a dataset.

    Attributes:
        name: the field name (``"cls"``, ``"cam0.npy"``).
        kind: ``"raw"``, ``"npy"``, ``"label"`` or ``"var"`` (see :mod:`feedline.format._schema`).
        dtype: numpy dtype string (``"<f4"``; ``"<i8"`` for labels); None for var.
        shape: shape of one sample's value, without the batch dimension
            (``(1024,)`` for a raw field, ``()`` for a label); None for var.
        column: the values (a ``raw`` / ``npy`` field of at most
            :data:`COLUMN_MAX_BYTES` a sample) are a column of the index: a batch of
            them is gathered, not read (``PackedDataset.gather_columns``).
    """

    name: str
    kind: Kind
    dtype: str | None
    shape: tuple[int, ...] | None
    column: bool = False

    @property
    def nbytes(self) -> int | None:
        """Bytes of one sample's value (None for var)."""
        if self.dtype is None or self.shape is None:
            return None
        return int(np.dtype(self.dtype).itemsize) * _prod(self.shape)


def _prod(shape: Iterable[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


@functools.lru_cache(maxsize=4096)
def candidate_kind(field: str) -> Kind:
    """The kind a field's name asks for, before its values are seen (cached: once per name)."""
    parts = field.lower().split(".")
    ext = parts[-1]
    if ext in RAW_DTYPES:
        return "raw"
    if ext == "npy":
        return "npy"
    if ext in LABELS or (ext == "txt" and len(parts) > 1 and parts[-2] in LABELS):
        return "label"
    return "var"


def _var(name: str) -> FieldSchema:
    return FieldSchema(name, "var", None, None)


# -- per-member facts ------------------------------------------------------------------------


def parse_npy_header(head: bytes | memoryview) -> tuple[int, np.dtype[Any], tuple[int, ...], bool]:
    """``(payload offset, dtype, shape, fortran_order)`` of a ``.npy`` payload's first bytes.

    ``head`` must hold at least the whole header. Never unpickles.

    Raises:
        ValueError: not a ``.npy`` or an unreadable header (an object dtype is
            returned: the caller decides).
    """
    mv = memoryview(head).cast("B")
    if len(mv) < 10 or bytes(mv[:6]) != b"\x93NUMPY":
        raise ValueError("not a .npy payload (bad magic)")
    major = mv[6]
    if major == 1:
        hlen, start = int.from_bytes(mv[8:10], "little"), 10
    elif major in (2, 3):
        if len(mv) < 12:
            raise ValueError(".npy header truncated")
        hlen, start = int.from_bytes(mv[8:12], "little"), 12
    else:
        raise ValueError(f"unsupported .npy format version {major}")
    if hlen > _MAX_NPY_HEADER:
        raise ValueError(f".npy header of {hlen} bytes is larger than {_MAX_NPY_HEADER}")
    if start + hlen > len(mv):
        raise ValueError(".npy header runs past the end of the member")
    dtype, shape, fortran = npy_header(bytes(mv[start : start + hlen]), major)
    return start + hlen, dtype, shape, fortran


# CPython 3.11 keeps the AST constructor's recursion depth per interpreter, not per thread:
# two threads in ast.parse at once can fail with "SystemError: AST constructor recursion depth
# mismatch" (python/cpython#106905). Thread workers decode .npy fields side by side, so the
# header's literal_eval runs under one lock (once per distinct header: the result is cached).
_AST_LOCK = threading.Lock()


@functools.lru_cache(maxsize=256)
def npy_header(text: bytes, major: int) -> tuple[np.dtype[Any], tuple[int, ...], bool]:
    """The dtype, shape and order an ``.npy`` header's dict literal names (parsed once per
    distinct header: the arrays of one field share it, and ``literal_eval`` is slow).

    Raises:
        ValueError: the header is not a valid ``.npy`` header dict.
    """
    try:
        with _AST_LOCK:
            header = ast.literal_eval(text.decode("utf-8" if major == 3 else "latin1"))
        if not isinstance(header, dict) or set(header) != {"descr", "fortran_order", "shape"}:
            raise ValueError("header keys must be descr, fortran_order and shape")
        dtype = np.lib.format.descr_to_dtype(header["descr"])
        shape = header["shape"]
        fortran = header["fortran_order"]
        if not isinstance(shape, tuple) or not all(type(s) is int and s >= 0 for s in shape):
            raise ValueError(f"bad shape {shape!r}")
        if not isinstance(fortran, bool):
            raise ValueError(f"bad fortran_order {fortran!r}")
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError, UnicodeDecodeError) as exc:
        raise ValueError(f".npy header unreadable: {exc}") from None
    return dtype, shape, fortran


def parse_label(data: bytes | memoryview) -> int:
    """The integer an ASCII label holds (as ``int(bytes.strip())`` reads it).

    Raises:
        ValueError: not an integer, longer than 64 bytes, or outside int64.
    """
    if len(data) > _MAX_LABEL_BYTES:
        raise ValueError(f"label of {len(data)} bytes is longer than {_MAX_LABEL_BYTES}")
    text = bytes(data).strip()
    if not text:
        raise ValueError("the label file is empty" if not len(data) else "the label file holds only white space")
    try:
        value = int(text)
    except ValueError:  # int()'s own message shows a bytes repr: "invalid literal ... b'1e3'"
        bom = " (it starts with a UTF-8 byte-order mark)" if text.startswith(b"\xef\xbb\xbf") else ""
        raise ValueError(f"{text[:20].decode('utf-8', 'replace')!r} is not a decimal integer{bom}") from None
    if not _I64[0] <= value <= _I64[1]:
        raise ValueError(f"label {value} does not fit int64")
    return value


_Fact = tuple[Any, ...]
"""``(aux, signature or None: "this member is not fixed"[, value bytes])``: the value
bytes (a ``raw`` / ``npy`` value of at most :data:`COLUMN_MAX_BYTES`) make its column."""


def member_fact(field: str, kind: Kind, data: bytes | memoryview, size: int) -> _Fact:
    """``(aux, signature)`` of one member of ``size`` bytes; ``data`` is its first bytes.

    ``data`` must hold the first ``min(size, HEAD_BYTES)`` bytes (npy header,
    label text: a streaming writer need not hold the rest). The signature is what must be equal across
    samples for the field to stay fixed; None makes the field var.

    Raises:
        ConfigError: an ``.npy`` holding Python objects (needs pickle), or a
            ``cls``-type label that is not an integer (the caller names key/field).
    """
    if kind == "raw":
        item = np.dtype(RAW_DTYPES[field.lower().rsplit(".", 1)[-1]]).itemsize
        if size % item:
            return 0, None
        return (0, ((size // item,),), bytes(data[:size])) if 0 < size <= COLUMN_MAX_BYTES else (0, ((size // item,),))
    if kind == "npy":
        try:
            start, dtype, shape, fortran = parse_npy_header(data)
        except ValueError:
            return 0, None  # not an array: decoding it will say so, at that sample
        if dtype.hasobject:
            raise ConfigError(".npy holds Python objects (reading it would need pickle)", fix=_FIX_NPY)
        fixed = (
            start + _prod(shape) * dtype.itemsize == size
            and (not fortran or len(shape) < 2)
            and len(shape) <= MAX_NDIM
            and dtype.fields is None
            and dtype.subdtype is None
            and dtype.itemsize > 0
            and len(dtype.str) <= DTYPE_CHARS
            and np.dtype(dtype.str) == dtype
        )
        if not fixed:
            return start, None
        if 0 < size - start <= COLUMN_MAX_BYTES:
            return start, (dtype.str, shape), bytes(data[start:size])
        return start, (dtype.str, shape)
    if kind == "label":
        try:
            if size > _MAX_LABEL_BYTES:
                raise ValueError(f"label of {size} bytes is longer than {_MAX_LABEL_BYTES}")
            return parse_label(data[:size]), ()
        except ValueError as exc:
            if field.lower().rsplit(".", 1)[-1] in STRICT_LABELS:
                raise ConfigError(
                    f"label is not an integer: {exc}",
                    fix="write one integer per label file (text labels belong in a .txt field)",
                ) from None
            return 0, None
    return 0, None


# -- building a shard's schema ----------------------------------------------------------------


class SchemaBuilder:
    """Collects member facts while a shard is written; :meth:`finish` gives the records.

    Usage (the writer): ``facts = builder.check(field, data, size)`` for every
    field of a sample *before* writing it (raises ConfigError without changing
    the builder), then ``builder.commit(fid, field, facts)`` per member.
    """

    def __init__(self) -> None:
        self._kinds: dict[int, Kind] = {}
        self._sigs: dict[int, tuple[Any, ...] | None] = {}
        self._counts: dict[int, int] = {}
        self._values: dict[int, list[bytes] | None] = {}  # field -> column values so far
        self.aux: list[int] = []

    @staticmethod
    def check(field: str, data: bytes | memoryview, size: int) -> _Fact:
        """The member's fact (see :func:`member_fact`); the builder is not changed."""
        return member_fact(field, candidate_kind(field), data, size)

    def commit(self, fid: int, field: str, fact: _Fact) -> None:
        """Record one member of field ``fid`` (members in write order)."""
        aux, sig = fact[0], fact[1]
        if fid not in self._kinds:
            self._kinds[fid] = candidate_kind(field)
            self._sigs[fid] = sig
            self._counts[fid] = 0
            self._values[fid] = []
        elif self._sigs[fid] != sig:
            self._sigs[fid] = None
        values = self._values[fid]
        if values is not None:
            if len(fact) > 2 and self._sigs[fid] is not None:
                values.append(fact[2])
            else:
                self._values[fid] = None  # a value too large, or the field is var: no column
        self._counts[fid] += 1
        self.aux.append(aux)

    def finish(self, fields: Sequence[str], num_samples: int,
               member_fields: np.ndarray) -> tuple[np.ndarray, np.ndarray, bytes]:
        """``(FIELD_DTYPE records, int64 aux per member, the columns)`` for the whole shard
        (the columns: each column field's values in sample order, fields in table order)."""
        kinds = {
            fid: (self._kinds[fid] if self._sigs[fid] is not None and self._counts[fid] == num_samples else "var")
            for fid in range(len(fields))
        }
        columns, total = {}, 0
        for fid in range(len(fields)):
            values = self._values.get(fid)
            if kinds[fid] in ("raw", "npy") and values is not None:
                total += sum(map(len, values))
                if total <= _MAX_COLUMNS:  # the header's u4 (billions of samples: never in practice)
                    columns[fid] = values
        schemas = [_schema(fields[fid], kinds[fid], self._sigs[fid], fid in columns) for fid in range(len(fields))]
        records = encode_fields(schemas)
        aux = np.array(self.aux, dtype=np.int64)
        if len(aux):
            keep = np.array([kinds[f] in ("npy", "label") for f in range(len(fields))], dtype=bool)
            aux[~keep[member_fields.astype(np.int64)]] = 0
        return records, aux, b"".join(b"".join(v) for _, v in sorted(columns.items()))


def _schema(name: str, kind: Kind, sig: tuple[Any, ...] | None, column: bool = False) -> FieldSchema:
    if kind == "var" or sig is None:
        return _var(name)
    if kind == "raw":
        return FieldSchema(name, "raw", np.dtype(RAW_DTYPES[name.lower().rsplit(".", 1)[-1]]).str, sig[0], column)
    if kind == "npy":
        return FieldSchema(name, "npy", sig[0], tuple(sig[1]), column)
    return FieldSchema(name, "label", "<i8", ())


def shard_schema(fields: Sequence[str], members: np.ndarray, num_samples: int,
                 facts: Iterable[_Fact]) -> tuple[np.ndarray, np.ndarray, bytes]:
    """``(records, aux, columns)`` from every member's fact, in member order (used by adopt)."""
    builder = SchemaBuilder()
    for fid, fact in zip(members["field"].tolist(), facts, strict=True):
        builder.commit(fid, fields[fid], fact)
    return builder.finish(fields, num_samples, members["field"])


# -- encoding and validating records ----------------------------------------------------------


def encode_fields(schemas: Sequence[FieldSchema]) -> np.ndarray:
    """FIELD_DTYPE records of ``schemas`` (in field-table order)."""
    out = np.zeros(len(schemas), dtype=FIELD_DTYPE)
    for i, s in enumerate(schemas):
        out[i]["kind"] = KINDS.index(s.kind)
        out[i]["flags"] = COLUMN_FLAG if s.column else 0
        if s.kind != "var" and s.shape is not None and s.dtype is not None:
            out[i]["ndim"] = len(s.shape)
            out[i]["dtype"] = s.dtype.encode("ascii")
            out[i]["shape"][: len(s.shape)] = s.shape
    return out


def decode_fields(records: np.ndarray, fields: Sequence[str], limit: int,
                  version: int = 2) -> list[FieldSchema] | str:
    """Validated :class:`FieldSchema` per record, or the reason the records are invalid.

    ``limit`` bounds a value's bytes (the shard size): a hostile shape cannot
    make a caller allocate more than the shard holds. ``version``: the index's (flags
    are 0 before 3).
    """
    out: list[FieldSchema] = []
    for rec, name in zip(records.tolist(), fields, strict=True):
        kind_id, ndim, flags, raw_dtype, shape = rec
        allowed = COLUMN_FLAG if version >= 3 else 0
        if kind_id >= len(KINDS) or flags & ~allowed:
            return f"field {name!r} has an unknown kind {kind_id} or flags {flags}"
        kind = KINDS[kind_id]
        if kind == "var":
            if ndim or raw_dtype or any(shape) or flags:
                return f"var field {name!r} carries a dtype, shape or flags"
            out.append(_var(name))
            continue
        if ndim > MAX_NDIM or any(shape[ndim:]):
            return f"field {name!r} has {ndim} dimensions (at most {MAX_NDIM})"
        dims = tuple(int(s) for s in shape[:ndim])
        reason = _check_dtype(kind, name, raw_dtype)
        if reason:
            return reason
        dtype = np.dtype(raw_dtype.decode("ascii"))
        if any(d > limit for d in dims) or _prod(dims) * dtype.itemsize > limit:
            return f"field {name!r} of shape {dims} is larger than the shard"
        if kind == "label" and dims != ():
            return f"label field {name!r} has shape {dims}"
        if kind == "raw" and len(dims) != 1:
            return f"raw field {name!r} has shape {dims}"
        column = bool(flags & COLUMN_FLAG)
        if column and (kind not in ("raw", "npy") or not 0 < _prod(dims) * dtype.itemsize <= COLUMN_MAX_BYTES):
            return f"{kind} field {name!r} of shape {dims} cannot be a column"
        out.append(FieldSchema(name, kind, dtype.str, dims, column))
    return out


def _check_dtype(kind: Kind, name: str, raw: bytes) -> str | None:
    want = {"label": "<i8"}.get(kind)
    if kind == "raw":
        ext = name.lower().rsplit(".", 1)[-1]
        if ext not in RAW_DTYPES:
            return f"raw field {name!r} has no raw dtype extension"
        want = np.dtype(RAW_DTYPES[ext]).str
    try:
        text = raw.decode("ascii")
        dtype = np.dtype(text)
    except (UnicodeDecodeError, TypeError, ValueError, SyntaxError, OverflowError):
        return f"field {name!r} has an unreadable dtype {raw!r}"
    if want is not None and dtype.str != want:
        return f"{kind} field {name!r} has dtype {text!r}, expected {want!r}"
    if dtype.str != text or dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None:
        return f"field {name!r} has an unsupported dtype {text!r}"
    if dtype.itemsize == 0:
        return f"field {name!r} has a zero-size dtype {text!r}"
    return None


def merge_schemas(shards: Iterable[tuple[Mapping[str, FieldSchema], int]], all_fields: Iterable[str]) -> dict[str, FieldSchema]:
    """The dataset's schema from each shard's ``(schema, number of samples)``.

    A field keeps a fixed kind only if every non-empty shard has it with the
    same kind, dtype and shape; otherwise (or if some shard lacks it) it is var. It is a
    column only if it is one in every such shard.
    """
    merged: dict[str, FieldSchema | None] = {}
    names = list(all_fields)
    for schema, num_samples in shards:
        if not num_samples:
            continue
        for name in names:
            mine = schema.get(name)
            if mine is None or mine.kind == "var":
                merged[name] = _var(name)
            elif name not in merged:
                merged[name] = mine
            elif (m := merged[name]) is not None and m.kind != "var" and replace(m, column=mine.column) == mine:
                merged[name] = replace(m, column=m.column and mine.column)
            else:
                merged[name] = _var(name)
    return {name: merged.get(name) or _var(name) for name in sorted(names)}
