"""A dataset in process workers (pickled, reopened in the child) and its read spans."""

from __future__ import annotations

import multiprocessing as mp
import threading
from pathlib import Path
from typing import Any

import pytest
from iodata import Samples, expected_samples

from feedline import spans
from feedline.io import PackedDataset, open_dataset


def _read_in_child(ds: PackedDataset, indices: list[int]) -> list[dict[str, Any]]:
    return [{k: v if k == "__key__" else bytes(v) for k, v in s.items()} for s in ds.read_many(indices)]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("method", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_process_workers_read_the_same_bytes(method: str, dataset: Path, small_shards: list[Samples]) -> None:
    want = [{"__key__": k, **f} for k, f in expected_samples(small_shards)]
    ds = open_dataset(dataset, io="buffered", verify=True)
    ds[0]  # the parent has open handles; a forked child must not reuse them blindly
    ctx = mp.get_context(method)
    chunks = [list(range(i, len(want), 3)) for i in range(3)]
    with ctx.Pool(2) as pool:
        results = pool.starmap(_read_in_child, [(ds, c) for c in chunks])
    for chunk, got in zip(chunks, results, strict=True):
        assert got == [want[i] for i in chunk]
    assert _read_in_child(ds, [5]) == [want[5]]  # the parent still reads after the children


class _Sink:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.spans: list[tuple[str, float, float, dict[str, Any]]] = []

    def record(self, stage: str, start: float, end: float, attrs: dict[str, Any]) -> None:
        with self.lock:
            self.spans.append((stage, start, end, attrs))


def test_window_reads_emit_read_spans_naming_the_shard(dataset: Path) -> None:
    ds = open_dataset(dataset, io="buffered")
    sink = _Sink()
    ds.read_many([0])
    assert not sink.spans
    spans.install(sink)
    try:
        ds.read_many([0, 1, 20, 39])
    finally:
        spans.uninstall(sink)
    assert sink.spans, "no read spans were emitted"
    assert {s[0] for s in sink.spans} == {"read"}
    assert {s[3]["shard"] for s in sink.spans} == {"shard-00000.tar", "shard-00001.tar", "shard-00002.tar"}
    for _, start, end, attrs in sink.spans:
        assert end >= start and attrs["bytes"] > 0 and attrs["backend"] == "buffered"
    count = len(sink.spans)
    ds.read_many([0])
    assert len(sink.spans) == count  # uninstalled: nothing more recorded
