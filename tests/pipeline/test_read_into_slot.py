"""Raw-tensor batches read straight into their slots give the batches of the per-sample path."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_spans import Sink

import feedline
from feedline import spans
from feedline.errors import WorkerError


def _pack(root: Path, n: int = 50, bad: dict[int, bytes] | None = None) -> Path:
    """Sample i: ``x.f32`` = 16 x float(i), ``m.u16`` = (i, i+1, i+2); ``bad`` replaces x.f32."""
    from feedline.format import pack

    src = root / "src"
    src.mkdir(parents=True)
    for i in range(n):
        x = (bad or {}).get(i, np.full(16, i, np.float32).tobytes())
        (src / f"s{i:04d}.x.f32").write_bytes(x)
        (src / f"s{i:04d}.m.u16").write_bytes(np.arange(i, i + 3, dtype=np.uint16).tobytes())
    pack([os.fspath(src)], os.fspath(root / "ds"), shard_size=600)  # several shards
    return root / "ds"


def _keep(sample: dict[str, Any]) -> dict[str, Any]:
    return sample  # any transform turns the slot path off: the per-sample reference


def _epochs(root: Path, epochs: int = 2, **kw: Any) -> tuple[list[dict[str, Any]], Any]:
    kw = {"batch_size": 8, "workers": 2, "seed": 3, **kw}
    out = []
    with feedline.Loader(os.fspath(root), **kw) as loader:
        for epoch in range(epochs):
            loader.set_epoch(epoch)
            out += [{k: v if k == "__key__" else v.numpy().copy() for k, v in b.items()}
                    for b in loader]
        return out, (loader._rt.ctx.columnar, loader.stats)


def _same(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x["__key__"] == y["__key__"]
        assert x["x.f32"].dtype == np.float32 and x["x.f32"].shape == (len(x["__key__"]), 16)
        assert np.array_equal(x["x.f32"], y["x.f32"]) and np.array_equal(x["m.u16"], y["m.u16"])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_slot_reads_equal_the_per_sample_path(tmp_path: Path, worker_type: str) -> None:
    root = _pack(tmp_path)
    got, (columnar, _) = _epochs(root, worker_type=worker_type, drop_last=False)
    want, (reference, _) = _epochs(root, worker_type=worker_type, drop_last=False, transform=_keep)
    assert columnar is True and reference is False
    _same(got, want)
    for b in got:  # and each row is its own sample
        ids = [int(k[1:]) for k in b["__key__"]]
        assert b["x.f32"][:, 0].tolist() == ids and b["m.u16"][:, 2].tolist() == [i + 2 for i in ids]
    assert sorted(k for b in got[: len(got) // 2] for k in b["__key__"]) == [f"s{i:04d}" for i in range(50)]


@pytest.mark.timeout(60)
def test_slot_reads_record_a_read_span_and_no_decode(tmp_path: Path) -> None:
    root = _pack(tmp_path)
    sink = Sink()
    spans.install(sink)
    try:
        _epochs(root, epochs=1, shuffle=False, workers=1)  # batch 1 starts after batch 0
    finally:
        spans.uninstall(sink)
    ours = [r for r in sink.records if "batch" in r[3]]
    later = {r[0] for r in ours if r[3]["batch"] > 0}  # batch 0 infers the layout the usual way
    assert "read" in later and not later & {"decode", "collate"}, later


@pytest.mark.timeout(60)
def test_overridden_or_mixed_fields_keep_the_per_sample_path(tmp_path: Path, packed: Path) -> None:
    root = _pack(tmp_path / "raw")
    got, (columnar, _) = _epochs(root, epochs=1, decode={"f32": lambda b: np.frombuffer(b, np.float32)})
    assert columnar is False and len(got) == 6
    _, (columnar, _) = _epochs(packed, epochs=1)  # jpg, cls, npy: decoded per sample
    assert columnar is False


@pytest.mark.timeout(60)
@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_a_sample_of_another_size_is_skipped_or_raised_as_before(tmp_path: Path, worker_type: str) -> None:
    bad = {21: np.zeros(15, np.float32).tobytes(), 40: b""}
    root = _pack(tmp_path, bad=bad)
    kw = {"worker_type": worker_type, "shuffle": False}  # the layout comes from batches 0-1, all good
    got, (columnar, stats) = _epochs(root, on_error="skip", **kw)
    want, (_, ref_stats) = _epochs(root, on_error="skip", transform=_keep, **kw)
    assert columnar is True
    _same(got, want)
    assert stats["skipped"] == ref_stats["skipped"] >= 2
    assert {s["key"] for s in stats["skipped_samples"]} == {"s0021", "s0040"}
    assert all(len(b["__key__"]) == 8 for b in got)
    with pytest.raises(WorkerError) as err:
        _epochs(root, **kw)
    assert err.value.key == "s0021" and err.value.stage == "collate"
