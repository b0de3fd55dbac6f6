"""Small fixed-size fields as columns of the index (format version 3): a scalar ``.f32``, a
short ``.i64`` vector, ``.npy`` scalars and small vectors (a big-endian one among them), a
label. Their batches are gathered from the index (recipe ``gather``: no read, no parse) and
equal the per-sample path's (a transform forces every field onto it) in dtype, shape and
bits, hostile values included (NaN with a payload, -0.0, inf, int64 and uint64 extremes),
with thread and process workers, shuffled, a short last batch, two epochs. A field of more
than 64 bytes a sample, one that some sample lacks and one whose size varies stay where they
were; a version-2 dataset still opens and reads the same values without columns.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import feedline
from feedline.format import (
    ShardIndex,
    encode_index,
    index_tars,
    pack,
    read_manifest,
    verify,
    write_manifest,
)
from feedline.format._checksum import checksum, hexdigest

N = 23
COLUMNS = {"rating.f32", "pair.i64", "user.npy", "xyz.npy", "big.npy", "flag.npy", "cls"}


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def _files(i: int) -> dict[str, bytes]:
    nan = np.array([0x7FC00001], np.uint32).view(np.float32)[0]  # a NaN with a payload
    rating = [nan, -0.0, np.inf, -np.inf, np.float32(3.4e38)][i % 5] if i < 5 else np.float32(i / 2)
    pair = np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max] if i == 0 else [i, -i], np.int64)
    return {
        "rating.f32": np.array([rating], np.float32).tobytes(),
        "pair.i64": pair.tobytes(),
        "user.npy": _npy(np.array(np.iinfo(np.uint64).max if i == 1 else i, np.uint64)),  # shape ()
        "xyz.npy": _npy(np.array([i, np.nan, -np.inf], np.float64)),                       # 24 bytes
        "big.npy": _npy(np.array([i, i + 0.5], ">f4")),                                    # big-endian
        "flag.npy": _npy(np.array(i % 2 == 0)),                                            # bool
        "cls": str(i % 3).encode(),
        "wide.f32": np.full(17, i, np.float32).tobytes(),             # 68 bytes: read, not a column
        "some.f32": np.float32(i).tobytes(),                          # missing in one sample
        "vary.i32": np.arange(1 + i % 2, dtype=np.int32).tobytes(),   # its size varies
        # numbers in a flat JSON object, a key missing in one sample: never a column (the
        # per-sample path gives the field as a list of dicts)
        "meta.json": json.dumps({"a": i, **({"b": i / 2} if i != 3 else {})}).encode(),
    }


def _source(root: Path) -> Path:
    for i in range(N):
        for field, data in _files(i).items():
            if field == "some.f32" and i == 7:
                continue
            (root / f"{i:04d}.{field}").parent.mkdir(parents=True, exist_ok=True)
            (root / f"{i:04d}.{field}").write_bytes(data)
    return root


def _identity(sample: dict[str, Any]) -> dict[str, Any]:
    return sample


def _batches(root: Path, **kw: Any) -> tuple[list[dict[str, Any]], dict[str, str]]:
    out = []
    with feedline.Loader(os.fspath(root), batch_size=5, workers=2, shuffle=True, seed=5,
                         drop_last=False, **kw) as loader:
        for epoch in range(2):
            loader.set_epoch(epoch)
            out += [{k: _numpy(v) for k, v in b.items()} for b in loader]
        return out, loader.stats["recipes"]


def _numpy(v: Any) -> Any:
    if isinstance(v, list):
        return [_numpy(x) for x in v]
    return v.numpy().copy() if hasattr(v, "numpy") else v


def _same(a: Any, b: Any) -> bool:
    """Equal in type, dtype, shape and bits (NaN payloads and -0.0 included)."""
    if isinstance(a, np.ndarray):
        return (isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
                and a.tobytes() == b.tobytes())
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("worker_type", ["thread", pytest.param("process", marks=pytest.mark.slow)])
def test_column_fields_are_gathered_and_equal_the_per_sample_path(tmp_path: Path, worker_type: str) -> None:
    pack([_source(tmp_path / "src")], tmp_path / "ds", shard_size=4096)  # several shards
    ds = feedline.open_dataset(tmp_path / "ds")
    assert {f for f, s in ds.schema.items() if s.column or s.kind == "label"} == COLUMNS
    batches, recipes = _batches(tmp_path / "ds", worker_type=worker_type)
    assert {f for f, r in recipes.items() if r == "gather"} == COLUMNS and recipes["meta.json"] == "sample"
    reference, per_sample = _batches(tmp_path / "ds", worker_type=worker_type, transform=_identity)
    assert set(per_sample.values()) == {"sample"}
    assert len(batches) == len(reference) == 10 and len(batches[4]["__key__"]) == 3  # 23 = 4 x 5 + 3
    for batch, ref in zip(batches, reference, strict=True):
        assert batch.keys() == ref.keys()
        for field in batch:
            assert _same(batch[field], ref[field]), field
    first = next(b for b in batches if "0000" in b["__key__"])
    row = first["__key__"].index("0000")
    assert first["pair.i64"][row].tolist() == [np.iinfo(np.int64).min, np.iinfo(np.int64).max]
    assert np.isnan(first["rating.f32"][row, 0]) and first["big.npy"].dtype == np.dtype("=f4")


def _rewrite(root: Path, version: int = 3, edit: Any = None) -> None:
    """Rewrite every index of ``root`` (as format ``version``; 2: no columns, as feedline
    before the columns wrote it), ``edit(columns)`` changing the column bytes, and sign it
    all again (index and manifest checksums), as a hostile or stale index would be."""
    from feedline.format._schema import encode_fields

    manifest = read_manifest(root)
    infos = []
    for info in manifest.shards:
        index = ShardIndex.load(root / info.index, shard_size=info.size)
        columns = bytearray(b"".join(index.columns[f].tobytes() for f in index.fields if f in index.columns))
        if edit is not None:
            edit(columns)
        data = encode_index(index.keys, index.fields, index.members, shard_size=index.shard_size,
                            shard_checksum=index.shard_checksum, field_records=encode_fields(list(index.schema.values())),
                            aux=index.aux, columns=bytes(columns), version=version)
        (root / info.index).write_bytes(data)
        infos.append(type(info)(**{**vars(info), "index_size": len(data), "index_checksum": hexdigest(checksum(data))}))
    write_manifest(root, type(manifest)(**{**vars(manifest), "version": version, "shards": tuple(infos)}))


@pytest.mark.timeout(60)
def test_verify_finds_a_column_that_differs_from_its_member(tmp_path: Path) -> None:
    pack([_source(tmp_path / "src")], tmp_path / "ds", shard_size=4096)
    assert verify(tmp_path / "ds") == []

    def flip(columns: bytearray) -> None:
        columns[0] ^= 1

    _rewrite(tmp_path / "ds", edit=flip)
    problems = verify(tmp_path / "ds")
    assert problems and all("column value differs" in p.message for p in problems)
    assert {p.field for p in problems} <= COLUMNS


@pytest.mark.timeout(60)
def test_a_version_2_dataset_reads_the_same_values_without_columns(tmp_path: Path) -> None:
    pack([_source(tmp_path / "src")], tmp_path / "ds", shard_size=4096)
    now, _ = _batches(tmp_path / "ds")
    _rewrite(tmp_path / "ds", version=2)
    ds = feedline.open_dataset(tmp_path / "ds")
    assert not any(s.column for s in ds.schema.values()) and ds.schema["user.npy"].kind == "npy"
    before, recipes = _batches(tmp_path / "ds")
    assert recipes["rating.f32"] == "sample" and recipes["cls"] == "gather"  # read per sample (the json is)
    assert all(_same(a[f], b[f]) for a, b in zip(now, before, strict=True) for f in a)
    # feedline index (adopting the tars) upgrades it: the columns are back, the same values
    index_tars(sorted((tmp_path / "ds").glob("*.tar")), tmp_path / "ds")
    assert feedline.open_dataset(tmp_path / "ds").schema["user.npy"].column
    again, recipes = _batches(tmp_path / "ds")
    assert recipes["rating.f32"] == "gather"
    assert all(_same(a[f], b[f]) for a, b in zip(now, again, strict=True) for f in a)


@pytest.mark.timeout(60)
def test_gather_columns_gives_per_sample_values_and_refuses_other_fields(tmp_path: Path) -> None:
    pack([_source(tmp_path / "src")], tmp_path / "ds", shard_size=4096)
    ds = feedline.open_dataset(tmp_path / "ds")
    idx = [22, 0, 5, 5]
    out = {"xyz.npy": np.zeros((4, 3), np.float64), "big.npy": np.zeros((4, 2), "=f4"),
           "user.npy": np.zeros(4, np.uint64), "cls": np.zeros(4, np.int64)}
    ds.gather_columns(idx, out)
    for field, rows in out.items():
        want = np.stack([np.asarray(feedline.decode.Decoders().decode_field(field, ds[i][field])) for i in idx])
        if field == "cls":
            want = want.astype(np.int64)
        assert _same(rows, want), field
    for field in ("wide.f32", "some.f32", "vary.i32", "nope"):
        with pytest.raises(feedline.FeedlineError, match="not a column"):
            ds.gather_columns([0], {field: np.zeros((1, 1), np.float32)})
    with pytest.raises(feedline.FeedlineError, match="shape"):
        ds.gather_columns([0, 1], {"xyz.npy": np.zeros((2, 4), np.float64)})
    with pytest.raises(IndexError):
        ds.gather_columns([N], {"cls": np.zeros(1, np.int64)})
