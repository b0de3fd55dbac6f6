"""A direct batch with images of another size is not read twice: the images already read
are decoded again from their bytes, the misfits given as the per-sample path gives them."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import simplejpeg

import feedline
from feedline.decode import Decoders
from feedline.format import pack
from feedline.pipeline import split
from feedline.pipeline.source import Source

SIZES = {11: (24, 16), 26: (32, 32), 27: (8, 8)}  # smaller, larger, smaller: in batches 1 and 3


def _pack(root: Path, n: int = 37) -> Path:
    src = root / "src"
    src.mkdir(parents=True)
    for i in range(n):
        img = np.random.default_rng(i).integers(0, 255, (*SIZES.get(i, (16, 24)), 3), dtype=np.uint8)
        (src / f"s{i:03d}.jpg").write_bytes(simplejpeg.encode_jpeg(img, quality=90))
        (src / f"s{i:03d}.cls").write_text(str(i))
    pack([os.fspath(src)], os.fspath(root / "ds"))
    return root / "ds"


def _epochs(root: Path, **kw: Any) -> tuple[list[Any], dict[str, Any]]:
    ds = feedline.open_dataset(root)
    where = {k: i for i, k in enumerate(ds.keys())}
    dec = Decoders()
    out = []
    with feedline.Loader(os.fspath(root), batch_size=8, workers=2, drop_last=False, seed=5,
                         **kw) as loader:
        for epoch in (0, 1):
            loader.set_epoch(epoch)
            for batch in loader:
                keys = batch["__key__"]
                want = [dec.decode_sample(ds[where[k]], key=k)["jpg"] for k in keys]
                got = batch["jpg"]
                assert isinstance(got, list) == any(where[k] in SIZES for k in keys)
                got = [t.numpy() for t in got] if isinstance(got, list) else list(got.numpy())
                assert len(got) == len(want) and all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))
                assert batch["cls"].tolist() == [where[k] for k in keys]
                out.append(list(keys))
        stats = loader.stats
    return out, stats


@pytest.mark.timeout(120)
@pytest.mark.parametrize("parts", [False, True])
def test_misfit_images_in_thread_batches_are_read_once(tmp_path: Path, parts: bool,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    root = _pack(tmp_path)
    monkeypatch.setattr(split, "PART_S", 1e-9 if parts else 1e9)
    fetched: Counter[int] = Counter()
    read: Counter[int] = Counter()
    fetch, read_fields = Source.fetch, Source.read_fields

    def counting_fetch(self: Source, indices: Any) -> Any:  # the per-sample path's read
        fetched.update(indices)
        return fetch(self, indices)

    def counting_read_fields(self: Source, indices: Any, fields: Any) -> Any:  # the direct one
        read.update(indices)
        return read_fields(self, indices, fields)

    monkeypatch.setattr(Source, "fetch", counting_fetch)
    monkeypatch.setattr(Source, "read_fields", counting_read_fields)
    batches, stats = _epochs(root, shuffle=False)
    assert stats["recipes"] == {"cls": "gather", "jpg": "decode-rows"}
    assert stats["part_rows"] == (2 if parts else 0)
    assert stats["list_fallbacks"] == {"jpg": 4}  # batches 1 and 3 of each epoch
    probe = set(range(8))  # batch 0, read per sample once to learn the layout
    assert set(fetched) == probe and all(c == 1 for c in fetched.values())
    # the direct path read each batch once a pass; the loader may also have prepared the
    # first batch per worker of a next pass (0-7, 8-15) before it was closed
    for i in range(37):
        assert read[i] - (1 if i in probe else 2) in ((0, 1) if i < 16 else (0,)), (i, read[i])
    assert [k for b in batches for k in b][:37] == [f"s{i:03d}" for i in range(37)]


@pytest.mark.slow  # process start-up: 3-18 s on this host; threads cover the contract by default
@pytest.mark.timeout(300)
def test_misfit_images_in_process_batches_equal_the_per_sample_path(tmp_path: Path) -> None:
    root = _pack(tmp_path)
    batches, stats = _epochs(root, shuffle=True, worker_type="process")
    assert stats["list_fallbacks"]["jpg"] >= 2 and len(batches) == 10
