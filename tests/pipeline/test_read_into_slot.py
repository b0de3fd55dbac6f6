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
    """Sample i: ``x.f32`` = 32 x float(i), ``m.u16`` = (i, i+1, ..., i+39); ``bad`` replaces x.f32
    (both over 64 bytes: read into rows, not columns of the index)."""
    from feedline.format import pack

    src = root / "src"
    src.mkdir(parents=True)
    for i in range(n):
        x = (bad or {}).get(i, np.full(32, i, np.float32).tobytes())
        (src / f"s{i:04d}.x.f32").write_bytes(x)
        (src / f"s{i:04d}.m.u16").write_bytes(np.arange(i, i + 40, dtype=np.uint16).tobytes())
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
            out += [{k: v if k == "__key__" else _own(v) for k, v in b.items()} for b in loader]
        stats = loader.stats
        return out, (set(stats["recipes"].values()) == {"read-rows"}, stats)


def _own(value: Any) -> Any:
    """A batch field as numpy (a list of tensors for a batch that fell back to a list)."""
    if isinstance(value, list):
        return [v.numpy().copy() for v in value]
    return value.numpy().copy()


def _same(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x["__key__"] == y["__key__"]
        assert x["x.f32"].dtype == np.float32 and x["x.f32"].shape == (len(x["__key__"]), 32)
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
def test_a_sample_of_another_size_gives_a_list_for_its_batch(tmp_path: Path,
                                                             worker_type: str) -> None:
    bad = {21: np.zeros(15, np.float32).tobytes(), 40: b""}
    root = _pack(tmp_path, bad=bad)
    kw = {"worker_type": worker_type, "shuffle": False, "drop_last": False}
    with pytest.warns(RuntimeWarning, match="'x.f32'"):
        got, (columnar, stats) = _epochs(root, epochs=1, **kw)
    assert columnar is True and stats["skipped"] == 0
    assert stats["list_fallbacks"] == {"x.f32": 2}  # batches 2 and 5
    for b in got:
        ids = [int(k[1:]) for k in b["__key__"]]
        assert b["m.u16"][:, 0].tolist() == ids
        if 21 in ids or 40 in ids:
            assert isinstance(b["x.f32"], list)
            sizes = [len(v) for v in b["x.f32"]]
            assert sizes == [15 if i == 21 else 0 if i == 40 else 32 for i in ids]
        else:
            assert b["x.f32"][:, 0].tolist() == ids


@pytest.mark.timeout(60)
@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_a_damaged_shard_still_names_shard_key_and_field(tmp_path: Path, worker_type: str) -> None:
    root = _pack(tmp_path)
    shard = sorted(root.glob("*.tar"))[1]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2 :] = b"\0" * (len(data) - len(data) // 2)  # zeroes over half the shard
    shard.write_bytes(bytes(data))
    ds = feedline.open_dataset(root, verify=True)
    with feedline.Loader(ds, batch_size=8, workers=2, worker_type=worker_type,
                         shuffle=False) as loader, pytest.raises(WorkerError) as err:
        list(loader)
    assert err.value.shard == shard.name and err.value.key and err.value.field, err.value


@pytest.mark.timeout(60)
@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_read_rows_plan_drops_the_read_buffers_of_the_first_batch(tmp_path: Path,
                                                                  worker_type: str) -> None:
    """Batch 0 is read through the dataset's buffers (per sample); once the plan reads every
    field into its rows, those buffers are not kept for the rest of the run."""
    root = _pack(tmp_path)
    ds = feedline.open_dataset(os.fspath(root))
    with feedline.Loader(ds, batch_size=8, workers=1, seed=3, worker_type=worker_type) as loader:
        n = sum(len(b["__key__"]) for b in loader)
        assert set(loader.stats["recipes"].values()) == {"read-rows"}
    assert n == 48  # drop_last
    if worker_type == "thread":  # process workers read through their own copy
        assert ds._state().pool.cached_bytes() == 0
    with feedline.Loader(ds, batch_size=8, workers=1, seed=3, transform=_keep) as loader:
        assert sum(len(b["__key__"]) for b in loader) == 48  # per sample: buffers reused
    assert ds._state().pool.cached_bytes() > 0
