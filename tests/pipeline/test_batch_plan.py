"""Every batch recipe gives the batches of the per-sample path: decode each sample with the
field codecs and stack (a reference computed here, outside the loader)."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import simplejpeg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import feedline
from feedline.decode import Decoders

FIELDS = ("a.f32", "b.u8", "c.npy", "d.jpg", "e.cls", "f.txt")


def _value(field: str, i: int) -> bytes:
    rng = np.random.default_rng(i)
    if field == "a.f32":
        return rng.standard_normal(20).astype(np.float32).tobytes()  # 80 bytes: read into rows
    if field == "b.u8":
        return rng.integers(0, 255, 5, dtype=np.uint8).tobytes()
    if field == "c.npy":
        buf = io.BytesIO()
        np.save(buf, rng.integers(-9, 9, (2, 3), dtype=np.int16))
        return buf.getvalue()
    if field == "d.jpg":
        return simplejpeg.encode_jpeg(rng.integers(0, 255, (8, 16, 3), dtype=np.uint8))
    if field == "e.cls":
        return str(i % 7).encode()
    return f"sample {i} " .encode() * (1 + i % 3)  # text of varying length: a list field


def _pack(root: Path, fields: tuple[str, ...], n: int) -> Path:
    from feedline.format import pack

    src = root / "src"
    src.mkdir(parents=True)
    for i in range(n):
        for f in fields:
            (src / f"k{i:04d}.{f}").write_bytes(_value(f, i))
    pack([os.fspath(src)], os.fspath(root / "ds"), shard_size=4096)
    return root / "ds"


def _check(root: Path, fields: tuple[str, ...], **kw: Any) -> dict[str, str]:
    ds = feedline.open_dataset(root)
    where = {k: i for i, k in enumerate(ds.keys())}
    dec = Decoders()
    seen: list[str] = []
    with feedline.Loader(os.fspath(root), workers=2, **kw) as loader:
        for epoch in range(2):
            loader.set_epoch(epoch)
            for batch in loader:
                keys = batch["__key__"]
                seen += keys
                samples = [dec.decode_sample(ds[where[k]], key=k) for k in keys]
                for f in fields:
                    want = [s[f] for s in samples]
                    got = batch[f]
                    if isinstance(got, list):
                        assert f == "f.txt" and got == want
                    else:
                        assert np.array_equal(got.numpy(), np.stack([np.asarray(w) for w in want]))
        recipes = loader.stats["recipes"]
    n = len(ds)
    per_epoch = len(seen) // 2
    assert sorted(seen[:per_epoch]) == sorted(seen[per_epoch:])
    if not kw.get("drop_last", True):
        assert sorted(seen[:per_epoch]) == sorted(ds.keys()[:n])
    return recipes


@pytest.mark.timeout(600)
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(fields=st.sets(st.sampled_from(FIELDS), min_size=1).map(lambda s: tuple(sorted(s))),
       n=st.integers(9, 40), batch=st.integers(1, 8), shuffle=st.booleans())
def test_recipes_equal_the_per_sample_path(tmp_path_factory: Any, fields: tuple[str, ...], n: int,
                                           batch: int, shuffle: bool) -> None:
    root = _pack(tmp_path_factory.mktemp("plan"), fields, n)
    recipes = _check(root, fields, batch_size=batch, shuffle=shuffle, drop_last=False)
    assert set(recipes) == set(fields)
    if "d.jpg" in fields:
        assert recipes["d.jpg"] == "decode-rows"
    for f in {"e.cls", "b.u8", "c.npy"} & set(fields):  # a label, 5 and 12 bytes: columns of the index
        assert recipes[f] == "gather"
    if set(fields) <= {"a.f32", "b.u8", "c.npy", "e.cls"} and "a.f32" in fields:  # nothing read per sample
        assert recipes["a.f32"] == "read-rows"
    if "f.txt" in fields:
        assert recipes["f.txt"] == "sample"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("fields", [("a.f32", "b.u8"), ("d.jpg", "e.cls"), FIELDS])
def test_recipes_equal_the_per_sample_path_in_processes(tmp_path: Path,
                                                        fields: tuple[str, ...]) -> None:
    root = _pack(tmp_path, fields, 29)
    _check(root, fields, batch_size=4, shuffle=True, drop_last=False, worker_type="process")
