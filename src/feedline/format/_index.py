"""The binary shard index: a versioned header, member records, string tables.

Layout (all little-endian, described as numpy dtypes in the FFCV manner)::

    HEADER_DTYPE         one record (magic, version, counts, sizes, checksums)
    MEMBER_DTYPE * n     one record per member, sorted by (sample, offset)
    key table            the sample keys, UTF-8, joined by "\\n"
    field table          the field names, UTF-8, joined by "\\n"
    FIELD_DTYPE * f      (version 2) one schema record per field (see ``_schema``)
    int64 * n            (version 2) ``aux`` per member: npy payload offset, label value, else 0
    columns              (version 3) for each field flagged as a column, in field-table
                         order: every sample's value bytes as stored (``nbytes`` each)

Version 3 added the columns: small ``raw`` / ``npy`` values (at most
``COLUMN_MAX_BYTES`` a sample) kept in the index, so a batch of them is a numpy
gather. A version-2 index still opens, its fields read as before (rebuild it
with ``feedline index`` to get the columns).

Version 2 added the field schema. A version-1 index still opens: its raw
fields of one size get kind ``raw`` and every other field ``var`` (the npy
headers and label values it never recorded are not read at open); rebuild it
with ``feedline index`` (or repack) to get ``npy`` and ``label`` fields.

The header's ``checksum`` is xxh3_64 of the whole file with that field zeroed,
so any flipped bit is caught at open. :meth:`ShardIndex.from_bytes` checks the
header, the sizes against the byte length, the checksum, the tables and every
record (bounds, order, overlaps) before building anything from them: a bad or
hostile index is a :class:`~feedline.errors.FormatError`, never a crash or a
huge allocation.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import xxhash

from feedline.errors import ChecksumError, FormatError
from feedline.format._checksum import ALGO_IDS, checksum_function
from feedline.format._files import open_regular
from feedline.format._schema import (
    COLUMN_MAX_BYTES,
    FIELD_DTYPE,
    FieldSchema,
    candidate_kind,
    decode_fields,
    encode_fields,
)

MAX_COLUMN_BYTES = (1 << 32) - 1
"""The column section's largest size (the header's ``u4``); the writer keeps columns within it."""
FORMAT_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
"""Index (and manifest) versions this feedline opens; it writes :data:`FORMAT_VERSION`."""
MAGIC = b"FEEDIDX\0"
HEADER_DTYPE = np.dtype(
    [
        ("magic", "S8"),
        ("version", "<u4"),
        ("checksum_algo", "<u4"),
        ("num_samples", "<u8"),
        ("num_members", "<u8"),
        ("num_fields", "<u8"),
        ("keys_bytes", "<u8"),
        ("fields_bytes", "<u8"),
        ("shard_size", "<u8"),
        ("shard_checksum", "<u8"),
        ("align", "<u4"),
        ("column_bytes", "<u4"),  # version 3: bytes of the column section (0 before)
        ("checksum", "<u8"),
    ]
)
MEMBER_DTYPE = np.dtype(
    [("sample", "<u4"), ("field", "<u2"), ("offset", "<u8"), ("size", "<u8"), ("checksum", "<u8")]
)
_ALGO_NAMES = {v: k for k, v in ALGO_IDS.items()}
_HEADER_NAMES: tuple[str, ...] = tuple(n for n, *_ in HEADER_DTYPE.descr)
_CHECKSUM_AT = HEADER_DTYPE.itemsize - 8  # the checksum is the header's last field
_FIX = "rebuild the index with `feedline index SHARD`, or re-copy the shard and its .idx"


def _fail(message: str, shard: str, **place: Any) -> FormatError:
    return FormatError(message, shard=shard or None, fix=_FIX, **place)


def encode_index(
    keys: list[str],
    fields: list[str],
    members: np.ndarray,
    *,
    shard_size: int,
    shard_checksum: int,
    checksum_algo: str = "xxh3",
    align: int = 0,
    field_records: np.ndarray | None = None,
    aux: np.ndarray | None = None,
    columns: bytes = b"",
    version: int = FORMAT_VERSION,
) -> bytes:
    """Serialise an index. ``members`` must have MEMBER_DTYPE (it is not validated here).

    ``field_records`` (FIELD_DTYPE, one per field), ``aux`` (int64, one per
    member) and ``columns`` (the column fields' values) are the schema (see
    :mod:`feedline.format._schema`); omitted, every field is var. ``version=1``
    writes the old layout without them, ``version=2`` without columns (their flags
    cleared): tests of backward compatibility use them.
    """
    if version not in READABLE_VERSIONS:
        raise ValueError(f"version must be one of {READABLE_VERSIONS}, got {version}")
    if field_records is None:
        field_records = encode_fields([FieldSchema(f, "var", None, None) for f in fields])
    if aux is None:
        aux = np.zeros(len(members), dtype=np.int64)
    if version < 3:
        field_records = np.array(field_records, dtype=FIELD_DTYPE)
        field_records["flags"] = 0
        columns = b""
    key_blob = "\n".join(keys).encode("utf-8", "surrogateescape")
    field_blob = "\n".join(fields).encode("utf-8", "surrogateescape")
    header = np.zeros((), dtype=HEADER_DTYPE)
    header["magic"] = MAGIC
    header["version"] = version
    header["checksum_algo"] = ALGO_IDS[checksum_algo]
    header["num_samples"] = len(keys)
    header["num_members"] = len(members)
    header["num_fields"] = len(fields)
    header["keys_bytes"] = len(key_blob)
    header["fields_bytes"] = len(field_blob)
    header["shard_size"] = shard_size
    header["shard_checksum"] = shard_checksum
    header["align"] = align
    if len(columns) > MAX_COLUMN_BYTES:
        raise ValueError(f"columns of {len(columns)} bytes exceed the index's {MAX_COLUMN_BYTES}")
    header["column_bytes"] = len(columns)
    body = np.ascontiguousarray(members, dtype=MEMBER_DTYPE).tobytes() + key_blob + field_blob
    if version >= 2:
        body += np.ascontiguousarray(field_records, dtype=FIELD_DTYPE).tobytes()
        body += np.ascontiguousarray(aux, dtype="<i8").tobytes()
    body += columns
    hasher = xxhash.xxh3_64(header.tobytes())
    hasher.update(body)
    header["checksum"] = hasher.intdigest()
    return header.tobytes() + body


def _parse_header(data: memoryview, shard: str) -> dict[str, int]:
    if len(data) < HEADER_DTYPE.itemsize:
        raise _fail(f"index is {len(data)} bytes, shorter than its header", shard)
    raw = np.frombuffer(data, dtype=HEADER_DTYPE, count=1)[0]
    if bytes(raw["magic"]) != MAGIC.rstrip(b"\0"):
        raise _fail("not a feedline index (bad magic)", shard)
    head = {name: int(raw[name]) for name in _HEADER_NAMES if name != "magic"}
    if head["version"] not in READABLE_VERSIONS:
        raise FormatError(
            f"index format version {head['version']} is not supported (this feedline reads "
            f"versions {', '.join(map(str, READABLE_VERSIONS))})",
            shard=shard or None,
            fix="upgrade feedline, or rebuild the index with this version's `feedline index`",
        )
    if head["checksum_algo"] not in _ALGO_NAMES:
        raise _fail(f"unknown checksum algorithm id {head['checksum_algo']}", shard)
    expected = (
        HEADER_DTYPE.itemsize
        + head["num_members"] * MEMBER_DTYPE.itemsize
        + head["keys_bytes"]
        + head["fields_bytes"]
        + _schema_bytes(head)
        + head["column_bytes"]
    )
    if head["version"] < 3 and head["column_bytes"]:
        raise _fail(f"a version-{head['version']} index declares columns", shard)
    if expected != len(data):
        raise _fail(
            f"index header describes {expected} bytes but the index has {len(data)}: its "
            "counts disagree with its size (truncated, padded or corrupt)",
            shard,
        )
    if head["num_samples"] > head["num_members"] or head["num_fields"] > head["num_members"]:
        raise _fail(
            f"index counts are inconsistent: {head['num_samples']} samples, "
            f"{head['num_fields']} fields, {head['num_members']} members",
            shard,
        )
    if head["num_fields"] > 1 << 16 or head["num_samples"] >= 1 << 32:
        raise _fail("index declares more samples or fields than the format allows", shard)
    return head


def _schema_bytes(head: dict[str, int]) -> int:
    """Bytes of the version-2 schema sections (0 for version 1)."""
    if head["version"] < 2:
        return 0
    return head["num_fields"] * FIELD_DTYPE.itemsize + head["num_members"] * 8


def _check_body_checksum(data: memoryview, stored: int, shard: str) -> None:
    zeroed = bytearray(data[: HEADER_DTYPE.itemsize])
    zeroed[_CHECKSUM_AT:] = bytes(8)
    hasher = xxhash.xxh3_64(bytes(zeroed))
    hasher.update(data[HEADER_DTYPE.itemsize :])
    if hasher.intdigest() != stored:
        raise ChecksumError("index checksum mismatch: the .idx file is corrupt", shard=shard or None, fix=_FIX)


def _parse_table(blob: memoryview, count: int, what: str, shard: str) -> list[str]:
    # surrogateescape keeps non-UTF-8 file names (as tar does); decoding cannot fail
    text = bytes(blob).decode("utf-8", "surrogateescape")
    names = text.split("\n") if text else []
    if len(names) != count:
        raise _fail(f"{what} table holds {len(names)} names, the header says {count}", shard)
    if not all(names):
        raise _fail(f"{what} table holds an empty name", shard)
    if len(set(names)) != count:
        seen: set[str] = set()
        for name in names:
            if name in seen:
                key = name if what == "key" else None
                raise _fail(f"{what} {name!r} appears twice in the index", shard, key=key)
            seen.add(name)
    return names


class ShardIndex:
    """A validated index of one shard: where every member's payload lies.

    Attributes:
        keys: sample keys in shard order.
        fields: the field-name table (``members['field']`` indexes into it).
        members: structured array (MEMBER_DTYPE), sorted by (sample, offset).
        sample_start: int64, ``num_samples + 1`` entries; sample ``i`` owns
            ``members[sample_start[i]:sample_start[i + 1]]``.
        num_samples: number of samples.
        shard_size: byte size of the shard file the index describes.
        shard_checksum: whole-file checksum of that shard.
        checksum_algo: ``"xxh3"`` or ``"crc32c"`` (member and shard checksums).
        align: the alignment the writer guaranteed for each sample's first byte (0: none).
        aux: int64 per member: the payload offset inside an ``npy`` member, the
            value of a ``label`` member, else 0 (all 0 in a version-1 index).
        columns: column field name -> its values for every sample in shard order,
            ``(num_samples, *shape)`` of the stored dtype (read-only views of the index
            bytes; version 3, see :attr:`FieldSchema.column`).
        schema: field name -> :class:`~feedline.format.FieldSchema` in this shard.
        version: the index format version read.
    """

    def __init__(self, **attrs: Any) -> None:
        self.keys: list[str] = attrs["keys"]
        self.fields: list[str] = attrs["fields"]
        self.members: np.ndarray = attrs["members"]
        self.aux: np.ndarray = attrs["aux"]
        self.schema: dict[str, FieldSchema] = attrs["schema"]
        self.version: int = attrs["version"]
        self.sample_start: np.ndarray = attrs["sample_start"]
        self.num_samples: int = len(self.keys)
        self.shard: str = attrs["shard"]
        self.shard_size: int = attrs["shard_size"]
        self.shard_checksum: int = attrs["shard_checksum"]
        self.checksum_algo: str = attrs["checksum_algo"]
        self.align: int = attrs["align"]
        self.columns: dict[str, np.ndarray] = attrs.get("columns", {})
        self._field_ids = {name: i for i, name in enumerate(self.fields)}
        self._field_rows: dict[str, np.ndarray] = {}

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, shard_size: int, shard: str = "") -> ShardIndex:
        """Read and validate the index at ``path`` for a shard of ``shard_size`` bytes.

        Raises:
            FormatError: missing, unreadable or invalid index, or a shard whose
                size differs from the one the index describes (truncated shard,
                trailing garbage). ChecksumError for a corrupt index file.
        """
        try:
            with open_regular(path) as f:  # a FIFO or device is refused, not read forever
                data = f.read(os.fstat(f.fileno()).st_size + 1)
        except OSError as e:
            raise FormatError(
                f"cannot read index {os.fspath(path)!r}: {e.strerror}", shard=shard or None, fix=_FIX
            ) from None
        return cls.from_bytes(data, shard_size=shard_size, shard=shard)

    @classmethod
    def from_bytes(cls, data: bytes | memoryview, *, shard_size: int, shard: str = "") -> ShardIndex:
        """Validate and decode index bytes (see :meth:`load`)."""
        view = memoryview(data).cast("B")
        head = _parse_header(view, shard)
        _check_body_checksum(view, head["checksum"], shard)
        if head["shard_size"] != shard_size:
            raise FormatError(
                f"shard is {shard_size} bytes but its index describes {head['shard_size']}: "
                "the shard is truncated or has trailing bytes",
                shard=shard or None,
                fix="re-copy the shard, or rebuild its index with `feedline index`",
            )
        pos = HEADER_DTYPE.itemsize
        n = head["num_members"]
        members = np.frombuffer(view, dtype=MEMBER_DTYPE, count=n, offset=pos)
        pos += n * MEMBER_DTYPE.itemsize
        keys = _parse_table(view[pos : pos + head["keys_bytes"]], head["num_samples"], "key", shard)
        pos += head["keys_bytes"]
        fields = _parse_table(view[pos : pos + head["fields_bytes"]], head["num_fields"], "field", shard)
        pos += head["fields_bytes"]
        sample_start = _check_members(members, keys, fields, shard_size, shard)
        columns: dict[str, np.ndarray] = {}
        if head["version"] >= 2:
            records = np.frombuffer(view, dtype=FIELD_DTYPE, count=len(fields), offset=pos)
            pos += len(fields) * FIELD_DTYPE.itemsize
            aux = np.frombuffer(view, dtype="<i8", count=n, offset=pos)
            schema = _check_schema(records, aux, members, keys, fields, shard_size, shard, head["version"])
            columns = _columns(view, pos + n * 8, schema, len(keys), shard)
        else:
            aux = np.zeros(n, dtype=np.int64)
            schema = _v1_schema(members, fields, len(keys))
        return cls(
            keys=keys,
            fields=fields,
            members=members,
            aux=aux,
            schema=schema,
            version=head["version"],
            sample_start=sample_start,
            shard=shard,
            shard_size=shard_size,
            shard_checksum=head["shard_checksum"],
            checksum_algo=_ALGO_NAMES[head["checksum_algo"]],
            align=head["align"],
            columns=columns,
        )

    def sample_extent(self, i: int) -> tuple[int, int]:
        """``[first payload byte, end of last payload byte)`` of sample ``i`` in the shard."""
        if not 0 <= i < self.num_samples:
            raise IndexError(f"sample {i} out of range for {self.num_samples} samples")
        lo, hi = int(self.sample_start[i]), int(self.sample_start[i + 1])
        last = self.members[hi - 1]
        return int(self.members["offset"][lo]), int(last["offset"]) + int(last["size"])

    def sample_members(self, i: int) -> np.ndarray:
        """The member records of sample ``i`` (a view, in shard order)."""
        if not 0 <= i < self.num_samples:
            raise IndexError(f"sample {i} out of range for {self.num_samples} samples")
        return self.members[int(self.sample_start[i]) : int(self.sample_start[i + 1])]

    def sample_fields(
        self, i: int, buf: bytes | bytearray | memoryview, *, base: int = 0, verify: bool = False
    ) -> dict[str, memoryview]:
        """Zero-copy views of sample ``i``'s fields inside ``buf``.

        Args:
            i: sample position in this shard.
            buf: bytes of the shard starting at shard offset ``base`` and
                covering :meth:`sample_extent` (the whole shard when ``base=0``).
            verify: compare each payload with its recorded checksum.

        Raises:
            ValueError: ``buf`` does not cover the sample.
            ChecksumError: a payload differs from its checksum (names key and field).
        """
        view = memoryview(buf).cast("B")
        fn = checksum_function(self.checksum_algo) if verify else None
        out: dict[str, memoryview] = {}
        for rec in self.sample_members(i).tolist():
            _, fid, offset, size, want = rec
            start = offset - base
            if start < 0 or start + size > len(view):
                raise ValueError(
                    f"buf covers shard bytes [{base}, {base + len(view)}) but sample {i} needs "
                    f"[{offset}, {offset + size})"
                )
            data = view[start : start + size]
            if fn is not None and fn(data) != want:
                raise ChecksumError(
                    "payload checksum mismatch",
                    shard=self.shard or None,
                    key=self.keys[i],
                    field=self.fields[fid],
                    fix="re-copy or repack the shard; `feedline verify` lists every bad member",
                )
            out[self.fields[fid]] = data
        return out

    def field_id(self, name: str) -> int:
        """Position of field ``name`` in :attr:`fields` (KeyError if absent)."""
        return self._field_ids[name]

    def field_rows(self, name: str) -> np.ndarray:
        """Member row of field ``name`` for every sample: int64, ``-1`` where a sample lacks it.

        Built once per field with one vectorised pass (a sample holds a field at most
        once; the index is validated so). A field the shard never has gives all ``-1``.
        """
        rows = self._field_rows.get(name)
        if rows is None:
            rows = np.full(self.num_samples, -1, dtype=np.int64)
            fid = self._field_ids.get(name)
            if fid is not None:
                hit = np.flatnonzero(self.members["field"] == fid)
                rows[self.members["sample"][hit]] = hit
            self._field_rows[name] = rows  # a race only computes the same array twice
        return rows

    def label_column(self, name: str) -> np.ndarray:
        """int64 value of label field ``name`` for every sample (no read, no parse).

        Raises:
            KeyError: ``name`` is not a ``label`` field of this shard.
        """
        if self.schema.get(name, None) is None or self.schema[name].kind != "label":
            raise KeyError(name)
        return self.aux[self.field_rows(name)]

    def column(self, name: str) -> np.ndarray:
        """The values of column field ``name`` for every sample (no read, no parse): a label
        field's int64 values, or a raw / npy column's ``(num_samples, *shape)`` values in
        their stored dtype.

        Raises:
            KeyError: ``name`` is neither a ``label`` field nor a column of this shard.
        """
        found = self.columns.get(name)
        return found if found is not None else self.label_column(name)

    def __len__(self) -> int:
        return self.num_samples

    def __repr__(self) -> str:
        return f"ShardIndex(shard={self.shard!r}, samples={self.num_samples}, members={len(self.members)})"


def _where(members: np.ndarray, bad: np.ndarray, keys: list[str], fields: list[str]) -> dict[str, Any]:
    i = int(np.argmax(bad))
    rec = members[i]
    s, f = int(rec["sample"]), int(rec["field"])
    return {
        "key": keys[s] if s < len(keys) else None,
        "field": fields[f] if f < len(fields) else None,
        "member": i,
    }


def _first_bad(
    checks: list[tuple[np.ndarray, str]], members: np.ndarray, keys: list[str], fields: list[str], shard: str
) -> None:
    for bad, message in checks:
        if bad.any():
            raise _fail(message, shard, **_where(members, bad, keys, fields))


def _check_members(
    members: np.ndarray, keys: list[str], fields: list[str], shard_size: int, shard: str
) -> np.ndarray:
    """Bounds, order and overlap checks (vectorised); returns ``sample_start``."""
    sample = members["sample"].astype(np.int64)
    field = members["field"].astype(np.int64)
    offset, size = members["offset"], members["size"]
    limit = np.uint64(shard_size)
    bounds = [
        (sample >= len(keys), "member names a sample past the key table"),
        (field >= len(fields), "member names a field past the field table"),
        (size > limit, "member size is larger than the shard"),
        (offset > limit - np.minimum(size, limit), "member runs past the end of the shard"),
        (offset % np.uint64(512) != 0, "member offset is not on a 512-byte tar block"),
    ]
    _first_bad(bounds, members, keys, fields, shard)
    unsorted = np.zeros(len(members), dtype=bool)
    overlap = np.zeros(len(members), dtype=bool)
    if len(members) > 1:
        end = offset[:-1] + size[:-1]  # cannot overflow: both are bounded by shard_size
        unsorted[1:] = sample[1:] < sample[:-1]
        overlap[1:] = (offset[1:] < end) | (offset[1:] <= offset[:-1])
    order = [
        (unsorted, "members are not sorted by sample"),
        (overlap, "member overlaps the previous one or is out of order"),
    ]
    _first_bad(order, members, keys, fields, shard)
    counts = np.bincount(sample, minlength=len(keys))
    if len(keys) and counts.min() == 0:
        raise _fail("sample has no members", shard, key=keys[int(np.argmin(counts))])
    _check_duplicate_fields(sample, field, members, keys, fields, shard)
    start = np.zeros(len(keys) + 1, dtype=np.int64)
    np.cumsum(counts, out=start[1:])
    return start


def _check_duplicate_fields(
    sample: np.ndarray, field: np.ndarray, members: np.ndarray, keys: list[str], fields: list[str], shard: str
) -> None:
    if len(sample) < 2:
        return
    combo = sample * (1 << 16) + field
    order = np.argsort(combo, kind="stable")
    dup = np.zeros(len(combo), dtype=bool)
    dup[order[1:]] = combo[order[1:]] == combo[order[:-1]]
    if dup.any():
        raise _fail("sample holds the same field twice", shard, **_where(members, dup, keys, fields))


def _v1_schema(members: np.ndarray, fields: list[str], num_samples: int) -> dict[str, FieldSchema]:
    """A version-1 index's schema from sizes alone: raw fields of one size, else var."""
    from feedline.format._schema import RAW_DTYPES

    out: dict[str, FieldSchema] = {}
    field_col = members["field"]
    for fid, name in enumerate(fields):
        out[name] = FieldSchema(name, "var", None, None)
        if candidate_kind(name) != "raw":
            continue
        sizes = members["size"][field_col == fid]
        dtype = np.dtype(RAW_DTYPES[name.lower().rsplit(".", 1)[-1]])
        if len(sizes) == num_samples and len(sizes) and (sizes == sizes[0]).all() and int(sizes[0]) % dtype.itemsize == 0:
            out[name] = FieldSchema(name, "raw", dtype.str, (int(sizes[0]) // dtype.itemsize,))
    return out


def _columns(view: memoryview, pos: int, schema: dict[str, FieldSchema], num_samples: int,
             shard: str) -> dict[str, np.ndarray]:
    """The column section at ``pos`` (version 3): one array per column field, in field-table
    order; the section must end the index exactly. Each value is at most
    ``COLUMN_MAX_BYTES`` (checked by ``decode_fields``), so the sizes cannot overflow."""
    out: dict[str, np.ndarray] = {}
    for name, fs in schema.items():
        if not fs.column:
            continue
        assert fs.dtype is not None and fs.shape is not None
        nbytes = int(fs.nbytes or 0)
        if not 0 < nbytes <= COLUMN_MAX_BYTES or len(view) - pos < nbytes * num_samples:
            raise _fail(f"index ends inside the column of field {name!r}", shard, field=name)
        flat = np.frombuffer(view, dtype=fs.dtype, count=num_samples * nbytes // np.dtype(fs.dtype).itemsize,
                             offset=pos)
        out[name] = flat.reshape((num_samples, *fs.shape))
        pos += nbytes * num_samples
    if pos != len(view):
        raise _fail(f"index holds {len(view) - pos} bytes past its columns: the header's column size "
                    "disagrees with the fields' columns", shard)
    return out


def _check_schema(
    records: np.ndarray, aux: np.ndarray, members: np.ndarray, keys: list[str], fields: list[str],
    shard_size: int, shard: str, version: int = 2,
) -> dict[str, FieldSchema]:
    """Validate the version-2 schema records and every member's ``aux`` against them."""
    schemas = decode_fields(records, fields, shard_size, version)
    if isinstance(schemas, str):
        raise _fail(f"index schema is invalid: {schemas}", shard)
    field_col = members["field"].astype(np.int64)
    counts = np.bincount(field_col, minlength=len(fields))
    kind = np.array([("raw", "npy", "label", "var").index(s.kind) for s in schemas], dtype=np.int64)
    nbytes = np.array([s.nbytes or 0 for s in schemas], dtype=np.int64)  # each <= shard_size
    for fid, s in enumerate(schemas):
        if s.kind != "var" and counts[fid] != len(keys):
            raise _fail(f"{s.kind} field is missing in some samples", shard, field=s.name)
    mkind = kind[field_col] if len(field_col) else np.zeros(0, dtype=np.int64)
    size = members["size"].astype(np.int64)  # <= shard_size, which fits int64 (a real file's size)
    want = nbytes[field_col] if len(field_col) else np.zeros(0, dtype=np.int64)
    npy = mkind == 1
    checks = [
        (((mkind == 0) | (mkind == 3)) & (aux != 0), "member of a raw or var field has a nonzero aux value"),
        ((mkind == 0) & (size != want), "raw member's size differs from its field's schema"),
        (npy & ((aux < 10) | (aux > size)), "npy member's payload offset lies outside the member"),
        (npy & (aux <= size) & (size - np.minimum(aux, size) != want), "npy member's payload size differs from its schema"),
    ]
    _first_bad(checks, members, keys, fields, shard)
    return {s.name: s for s in schemas}
