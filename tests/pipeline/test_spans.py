"""Every stage reports its time through feedline.spans, from threads and processes."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import feedline
from feedline import spans


class Sink:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.records: list[tuple[str, float, float, dict[str, Any]]] = []

    def record(self, stage: str, start: float, end: float, attrs: dict[str, Any]) -> None:
        with self.lock:
            self.records.append((stage, start, end, attrs))


def _keep(sample: dict[str, Any]) -> dict[str, Any]:
    return sample


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_stage_spans_are_emitted(packed: Path, worker_type: str) -> None:
    sink = Sink()
    spans.install(sink)
    try:
        with feedline.Loader(str(packed), batch_size=8, workers=2, worker_type=worker_type,
                             transform=_keep, shuffle=False) as loader:
            assert len(list(loader)) == 5
    finally:
        spans.uninstall(sink)
    ours = [r for r in sink.records if "batch" in r[3]]  # the io layer may add its own
    stages = {r[0] for r in ours}
    expected = {"read", "decode", "transform", "h2d", "wait"}
    expected |= {"collate"} if worker_type == "thread" else {"pin"}
    assert expected <= stages, stages
    for stage, start, end, attrs in ours:
        assert end >= start and 0 <= attrs["batch"] < 5
        if stage in ("read", "decode", "transform"):
            assert attrs["worker"].startswith("feedline-")


def test_process_workers_started_before_a_measurement_report_to_it(packed: Path) -> None:
    """diagnose arms a launched rank at its first batch, after its process workers started:
    the jobs submitted from then on are timed."""
    sink = Sink()
    with feedline.Loader(str(packed), batch_size=8, workers=2, worker_type="process",
                         transform=_keep, shuffle=False, prefetch=1) as loader:
        batches = iter(loader)
        next(batches)  # workers up, nothing listening
        spans.install(sink)
        try:
            rest = list(batches)
        finally:
            spans.uninstall(sink)
    assert len(rest) == 4
    timed = {(r[0], r[3]["batch"]) for r in sink.records if r[0] == "transform" and "worker" in r[3]}
    assert {b for _, b in timed} & {3, 4}, sink.records  # batches submitted after the install
