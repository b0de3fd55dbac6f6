"""The field schema: decided at pack / index time, stored in the index (v2), merged per dataset."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
import pytest

from feedline.decode import codecs
from feedline.errors import ConfigError, FormatError
from feedline.format import (
    FORMAT_VERSION,
    FieldSchema,
    ShardIndex,
    ShardWriter,
    encode_index,
    index_tars,
    load_index,
    pack,
    read_manifest,
)
from feedline.format._schema import RAW_DTYPES, candidate_kind, merge_schemas, parse_label
from feedline.io import open_dataset


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def _write_files(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def _mixed(n: int, seed: int = 0) -> dict[str, bytes]:
    """Files of a dataset with every kind of field (a layout users have: ImageFolder-ish keys)."""
    rng = np.random.default_rng(seed)
    files: dict[str, bytes] = {}
    for i in range(n):
        key = f"train/{'cat' if i % 2 else 'dog'}/{i:05d}"
        files[f"{key}.emb.npy"] = _npy(rng.standard_normal((4, 8)).astype(np.float32))
        files[f"{key}.f32"] = rng.standard_normal(16).astype(np.float32).tobytes()
        files[f"{key}.cls"] = b"%d\n" % (i % 7)
        files[f"{key}.label.txt"] = b"%d" % (-i)
        files[f"{key}.ragged.npy"] = _npy(np.arange(i % 3 + 1, dtype=np.int16))
        files[f"{key}.json"] = b'{"i": %d}' % i
        if i % 4:
            files[f"{key}.depth.u16"] = rng.integers(0, 9, 6, dtype=np.uint16).tobytes()
    return files


EXPECTED = {
    "emb.npy": FieldSchema("emb.npy", "npy", "<f4", (4, 8)),
    "f32": FieldSchema("f32", "raw", "<f4", (16,), column=True),  # 64 bytes: a column of the index
    "cls": FieldSchema("cls", "label", "<i8", ()),
    "label.txt": FieldSchema("label.txt", "label", "<i8", ()),
    "ragged.npy": FieldSchema("ragged.npy", "var", None, None),  # shape varies
    "json": FieldSchema("json", "var", None, None),
    "depth.u16": FieldSchema("depth.u16", "var", None, None),  # missing in some samples
}


def test_pack_writes_the_schema_and_the_dataset_merges_it(tmp_path: Path) -> None:
    src = _write_files(tmp_path / "src", _mixed(40))
    pack([src], tmp_path / "ds", shard_size=20_000)
    manifest = read_manifest(tmp_path / "ds")
    assert manifest.version == FORMAT_VERSION == 3 and len(manifest.shards) > 2
    for info in manifest.shards:
        index = load_index(tmp_path / "ds", info)
        assert index.version == 3
        assert index.schema["emb.npy"] == EXPECTED["emb.npy"]
        assert index.schema["cls"].kind == "label"
    ds = open_dataset(tmp_path / "ds")
    assert dict(ds.schema) == EXPECTED
    assert ds.schema["emb.npy"].nbytes == 4 * 8 * 4
    with pytest.raises(TypeError):
        ds.schema["cls"] = EXPECTED["json"]  # type: ignore[index]


def test_the_same_schema_through_feedline_index(tmp_path: Path) -> None:
    """Adopting tars made by the stdlib (as a WebDataset writer makes them) gives the same schema."""
    files = _mixed(30, seed=3)
    tars = []
    for part in range(2):
        tar_path = tmp_path / f"part{part}.tar"
        with tarfile.open(tar_path, "w") as tar:
            keys = sorted({name.split(".", 1)[0] for name in files})[part::2]
            for key in keys:
                for name in sorted(n for n in files if n.split(".", 1)[0] == key):
                    info = tarfile.TarInfo(name)
                    info.size = len(files[name])
                    tar.addfile(info, io.BytesIO(files[name]))
        tars.append(tar_path)
    index_tars(tars, tmp_path)
    assert dict(open_dataset(tmp_path).schema) == EXPECTED


def test_a_field_fixed_in_one_shard_and_not_another_is_var(tmp_path: Path) -> None:
    with ShardWriter(tmp_path / "a.tar") as w:
        w.write_sample("k0", {"x.npy": _npy(np.zeros(3, np.float32)), "cls": b"1"})
    with ShardWriter(tmp_path / "b.tar") as w:
        w.write_sample("k1", {"x.npy": _npy(np.zeros(4, np.float32)), "cls": b"2"})
    one = w.index
    assert one is not None and one.schema["x.npy"] == FieldSchema("x.npy", "npy", "<f4", (4,), column=True)
    idx_a = ShardIndex.load(tmp_path / "a.tar.idx", shard_size=(tmp_path / "a.tar").stat().st_size)
    merged = merge_schemas([(idx_a.schema, 1), (one.schema, 1), ({}, 0)], ["x.npy", "cls"])
    assert merged["x.npy"].kind == "var" and merged["cls"].kind == "label"
    assert merge_schemas([(idx_a.schema, 1), ({}, 2)], ["cls"])["cls"].kind == "var"  # a shard lacks it


def test_object_npy_is_refused_at_pack_time_naming_the_file(tmp_path: Path) -> None:
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    src = _write_files(tmp_path / "src", {"a/000.npy": _npy(np.zeros(2)), "a/001.npy": buf.getvalue()})
    with pytest.raises(ConfigError, match="pickle") as e:
        pack([src], tmp_path / "out")
    assert e.value.key == "a/001" and e.value.field == "npy" and "a/001.npy" in str(e.value)
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_non_integer_cls_is_refused_but_text_label_txt_is_var(tmp_path: Path) -> None:
    src = _write_files(tmp_path / "src", {"000.cls": b"3", "001.cls": b"three"})
    with pytest.raises(ConfigError, match="not an integer") as e:
        pack([src], tmp_path / "out")
    assert (e.value.key, e.value.field) == ("001", "cls")
    src2 = _write_files(tmp_path / "src2", {"000.label.txt": b"3", "001.label.txt": b"tabby cat"})
    pack([src2], tmp_path / "out2")
    assert open_dataset(tmp_path / "out2").schema["label.txt"].kind == "var"


def test_a_bad_member_leaves_the_writer_unchanged(tmp_path: Path) -> None:
    with ShardWriter(tmp_path / "s.tar") as w:
        w.write_sample("a", {"cls": b"1", "f32": bytes(8)})
        with pytest.raises(ConfigError):
            w.write_sample("b", {"f32": bytes(8), "cls": b"x"})
        w.write_sample("c", {"cls": b"2", "f32": bytes(8)})
    assert w.index is not None and w.index.keys == ["a", "c"]
    assert w.index.label_column("cls").tolist() == [1, 2]
    assert w.index.schema["f32"] == FieldSchema("f32", "raw", "<f4", (2,), column=True)
    assert w.index.column("f32").shape == (2, 2)


@pytest.mark.parametrize(
    ("arr", "kind"),
    [
        (np.zeros((3, 2), np.float64), "npy"),
        (np.asfortranarray(np.arange(6.0).reshape(2, 3)), "var"),  # payload is not C order
        (np.zeros(5, ">i4"), "npy"),
        (np.zeros((), np.uint8), "npy"),
        (np.zeros(3, [("a", "<f4"), ("b", "<i2")]), "var"),  # structured
        (np.zeros((1,) * 9, np.uint8), "var"),  # more dims than the index stores
        (np.array(["ab", "c"]), "npy"),
    ],
)
def test_npy_kinds(tmp_path: Path, arr: np.ndarray, kind: str) -> None:
    with ShardWriter(tmp_path / "s.tar") as w:
        w.write_sample("a", {"x.npy": _npy(arr)})
        w.write_sample("b", {"x.npy": _npy(arr)})
    assert w.index is not None
    got = w.index.schema["x.npy"]
    assert got.kind == kind
    if kind == "npy":
        assert (got.dtype, got.shape) == (arr.dtype.str, arr.shape)
        assert int(w.index.aux[0]) + arr.nbytes == int(w.index.members["size"][0])


def test_garbage_npy_is_var_not_refused(tmp_path: Path) -> None:
    """A file named .npy that is no array stays readable as bytes (decode fails at that sample)."""
    with ShardWriter(tmp_path / "s.tar") as w:
        w.write_sample("a", {"x.npy": b"not an array at all"})
        w.write_sample("b", {"x.npy": _npy(np.zeros(2))[:-3]})  # body shorter than its header says
    assert w.index is not None and w.index.schema["x.npy"].kind == "var"


@pytest.mark.parametrize(
    ("text", "value"),
    [(b"7", 7), (b" -3\n", -3), (b"+12", 12), (b"1_000", 1000), (b"9223372036854775807", 2**63 - 1)],
)
def test_label_values_match_the_cls_decoder(text: bytes, value: int) -> None:
    assert parse_label(text) == value == codecs.decode_cls(text, codecs.Limits())


@pytest.mark.parametrize("text", [b"", b"3.5", b"0x10", b"9223372036854775808", b"1" * 65, b"\xff"])
def test_labels_that_are_not_int64_integers(text: bytes) -> None:
    with pytest.raises(ValueError):
        parse_label(text)


def test_candidate_kinds_and_raw_dtypes_match_the_decoder() -> None:
    assert RAW_DTYPES == codecs.RAW_DTYPES
    kinds = {f: candidate_kind(f) for f in
             ["cls", "x.cls", "cls.txt", "label.txt", "target", "idx", "txt", "npy", "a.NPY", "u8", "jpg", "labelx"]}
    assert kinds == {"cls": "label", "x.cls": "label", "cls.txt": "label", "label.txt": "label",
                     "target": "label", "idx": "label", "txt": "var", "npy": "npy", "a.NPY": "npy",
                     "u8": "raw", "jpg": "var", "labelx": "var"}


def test_a_v1_index_still_opens_with_raw_fields_only(tmp_path: Path) -> None:
    with ShardWriter(tmp_path / "s.tar") as w:
        for i in range(3):
            w.write_sample(f"k{i}", {"f32": bytes(16), "cls": b"%d" % i, "x.npy": _npy(np.zeros(2))})
    index = w.index
    assert index is not None
    data = encode_index(index.keys, index.fields, index.members, shard_size=index.shard_size,
                        shard_checksum=index.shard_checksum, version=1)
    old = ShardIndex.from_bytes(data, shard_size=index.shard_size)
    assert old.version == 1 and not old.aux.any()
    assert {n: s.kind for n, s in old.schema.items()} == {"f32": "raw", "cls": "var", "x.npy": "var"}


def _resigned(index: ShardIndex, records: np.ndarray | None = None, aux: np.ndarray | None = None,
              columns: bytes | None = None) -> bytes:
    from feedline.format._schema import encode_fields

    return encode_index(
        index.keys, index.fields, index.members, shard_size=index.shard_size, shard_checksum=index.shard_checksum,
        field_records=encode_fields(list(index.schema.values())) if records is None else records,
        aux=index.aux.copy() if aux is None else aux,
        columns=b"".join(index.columns[f].tobytes() for f in index.fields if f in index.columns)
        if columns is None else columns,
    )


def test_hostile_schema_records_are_format_errors(tmp_path: Path) -> None:
    with ShardWriter(tmp_path / "s.tar") as w:
        for i in range(3):
            w.write_sample(f"k{i}", {"f32": bytes(16), "cls": b"%d" % i, "x.npy": _npy(np.zeros(2)), "j": b"{}"})
    index = w.index
    assert index is not None
    assert ShardIndex.from_bytes(_resigned(index), shard_size=index.shard_size).schema == index.schema
    base = __import__("feedline.format._schema", fromlist=["encode_fields"]).encode_fields(list(index.schema.values()))
    fid = {name: i for i, name in enumerate(index.fields)}

    def rec(**edit: object) -> np.ndarray:
        r = base.copy()
        field = str(edit.pop("field"))
        for k, v in edit.items():
            r[fid[field]][k] = v
        return r

    huge = np.array([2**40, 2**40] + [0] * 6, dtype="<u8")
    cases: list[tuple[np.ndarray | None, np.ndarray | None, str]] = [
        (rec(field="x.npy", kind=9), None, "unknown kind"),
        (rec(field="x.npy", flags=2), None, "unknown kind"),
        (rec(field="cls", flags=1), None, "cannot be a column"),
        (rec(field="j", flags=1), None, "var field"),
        (rec(field="x.npy", ndim=9), None, "dimensions"),
        (rec(field="x.npy", dtype=b"O"), None, "unsupported dtype"),
        (rec(field="x.npy", dtype=b"f4,i4"), None, "dtype"),
        (rec(field="x.npy", dtype=b"\xff\xfe"), None, "unreadable dtype"),
        (rec(field="x.npy", dtype=b"S0"), None, "dtype"),
        (rec(field="x.npy", shape=huge, ndim=2), None, "larger than the shard"),
        (rec(field="x.npy", dtype=b"<f4"), None, "payload size"),
        (rec(field="cls", dtype=b"<i4"), None, "expected '<i8'"),
        (rec(field="cls", ndim=1, shape=np.array([1] + [0] * 7, dtype="<u8")), None, "shape"),
        (rec(field="f32", shape=np.array([5] + [0] * 7, dtype="<u8")), None, "raw member's size"),
        (rec(field="j", dtype=b"<f4"), None, "var field"),
        (rec(field="j", kind=1, dtype=b"<f8", ndim=1, shape=np.array([2] + [0] * 7, dtype="<u8")), None, "payload"),
    ]
    aux = index.aux.copy()
    npy_rows = np.flatnonzero(index.members["field"] == fid["x.npy"])
    for value in (-1, 0, 9, 2**62, -(2**63)):
        bad = aux.copy()
        bad[npy_rows[1]] = value
        cases.append((None, bad, "npy member"))
    bad = aux.copy()
    bad[np.flatnonzero(index.members["field"] == fid["j"])[0]] = 5
    cases.append((None, bad, "nonzero aux"))
    for records, aux_edit, message in cases:
        with pytest.raises(FormatError, match=message):
            ShardIndex.from_bytes(_resigned(index, records, aux_edit), shard_size=index.shard_size, shard="s.tar")
    assert set(index.columns) == {"f32", "x.npy"}  # 16 and 16 bytes a sample
    whole = b"".join(index.columns[f].tobytes() for f in index.fields if f in index.columns)
    for columns, message in ((b"", "ends inside the column"), (whole[:-1], "ends inside the column"),
                             (whole + bytes(16), "past its columns")):
        with pytest.raises(FormatError, match=message):
            ShardIndex.from_bytes(_resigned(index, columns=columns), shard_size=index.shard_size, shard="s.tar")
    too_big = rec(field="x.npy", shape=np.array([2, 40] + [0] * 6, dtype="<u8"), ndim=2)  # 640 bytes
    with pytest.raises(FormatError, match="cannot be a column"):
        ShardIndex.from_bytes(_resigned(index, too_big), shard_size=index.shard_size, shard="s.tar")
    for version in (1, 2):  # an older layout never holds columns; a flag or a declared size is refused
        flagged = encode_index(index.keys, index.fields, index.members, shard_size=index.shard_size,
                               shard_checksum=index.shard_checksum, version=version)
        assert not ShardIndex.from_bytes(flagged, shard_size=index.shard_size).columns
