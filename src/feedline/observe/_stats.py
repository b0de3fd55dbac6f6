"""Span recording and tail-aware summaries (p50/p95/p99/max, never only means).

:class:`Recorder` is a thread-safe :class:`~feedline.spans.SpanSink`
that keeps every finished span (up to a cap) so reports can compute
percentiles and traces can show each interval. :class:`StageStats` is the
summary of one stage's durations.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

DEFAULT_MAX_SPANS = 500_000


@dataclass(frozen=True)
class StageStats:
    """Durations of one stage, in seconds."""

    count: int
    mean: float
    p50: float
    p95: float
    p99: float
    max: float
    total: float = 0.0

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StageStats:
        return cls(**{k: data[k] for k in ("count", "mean", "p50", "p95", "p99", "max")},
                   total=float(data.get("total", 0.0)))


EMPTY_STATS = StageStats(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


def summarize(durations: Iterable[float]) -> StageStats:
    """Summarise durations (seconds) into count, mean, p50, p95, p99 and max.

    An empty input gives :data:`EMPTY_STATS` (all zero). Percentiles use linear
    interpolation (numpy's default).
    """
    arr = np.fromiter(durations, dtype=np.float64)
    if arr.size == 0:
        return EMPTY_STATS
    p50, p95, p99 = np.percentile(arr, [50, 95, 99])
    return StageStats(
        count=int(arr.size),
        mean=float(arr.mean()),
        p50=float(p50),
        p95=float(p95),
        p99=float(p99),
        max=float(arr.max()),
        total=float(arr.sum()),
    )


@dataclass(frozen=True)
class Span:
    """One finished stage interval (perf_counter seconds, shared across processes on Linux)."""

    stage: str
    start: float
    end: float
    pid: int
    tid: int
    attrs: dict[str, Any]

    @property
    def duration(self) -> float:
        return self.end - self.start

    def to_list(self) -> list[Any]:
        return [self.stage, self.start, self.end, self.pid, self.tid, self.attrs]

    @classmethod
    def from_list(cls, row: Sequence[Any]) -> Span:
        return cls(str(row[0]), float(row[1]), float(row[2]), int(row[3]), int(row[4]),
                   dict(row[5]) if len(row) > 5 else {})


Columns = tuple[list[str], list[float], list[float], list[int], list[int], list[dict[str, Any]]]
"""Spans as six lists: stage, start, end, pid, tid, attrs."""


class Recorder:
    """Thread-safe span sink keeping up to ``max_spans`` spans in memory.

    Spans past the cap are counted in :attr:`dropped` instead of stored, so a
    long run cannot grow memory without bound. Recording is on the hot path of
    every measured step: each field goes to its own list under one lock, and the
    :class:`Span` objects are built only when :meth:`spans` is read.

    Columns, not one tuple per span: a tuple holding the ``attrs`` dict stays
    tracked by the garbage collector, so every span recorded made CPython's full
    collections come sooner and take longer in the measured process (with torch
    loaded, one each ~20,000 spans, 80 ms; 80 % of a span's cost). Strings, floats,
    ints and a dict of such values are not tracked.
    """

    def __init__(self, max_spans: int = DEFAULT_MAX_SPANS) -> None:
        if max_spans < 1:
            raise ValueError(f"max_spans must be >= 1, got {max_spans!r}")
        self.max_spans = max_spans
        self.dropped = 0
        self._stage: list[str] = []
        self._start: list[float] = []
        self._end: list[float] = []
        self._pids: list[int] = []
        self._tids: list[int] = []
        self._attrs: list[dict[str, Any]] = []
        self._merged: list[Span] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def record(self, stage: str, start: float, end: float, attrs: dict[str, Any]) -> None:
        """Store one span (called by :func:`feedline.spans.emit`).

        ``attrs`` may carry ``pid`` / ``tid`` to file the span under another
        process or thread than the caller's.
        """
        if "pid" in attrs or "tid" in attrs:
            pid = int(attrs.pop("pid", self._pid))
            tid = int(attrs.pop("tid", threading.get_ident()))
        else:
            pid, tid = self._pid, threading.get_ident()
        with self._lock:
            if len(self._stage) + len(self._merged) >= self.max_spans:
                self.dropped += 1
                return
            self._stage.append(stage)
            self._start.append(start)
            self._end.append(end)
            self._pids.append(pid)
            self._tids.append(tid)
            self._attrs.append(attrs)

    def add(self, spans: Iterable[Span]) -> None:
        """Merge spans measured elsewhere (worker processes)."""
        with self._lock:
            for s in spans:
                if len(self._stage) + len(self._merged) >= self.max_spans:
                    self.dropped += 1
                else:
                    self._merged.append(s)

    def _copy(self) -> tuple[Columns, list[Span]]:
        """Copies of the recorded columns and of the merged spans, taken under the lock (a
        recording thread waits for only that long)."""
        with self._lock:
            return (list(self._stage), list(self._start), list(self._end), list(self._pids),
                    list(self._tids), list(self._attrs)), list(self._merged)

    def columns(self) -> Columns:
        """The stored spans as six lists (stage, start, end, pid, tid, attrs; recorded, then
        merged; attrs not copied)."""
        cols, merged = self._copy()
        for s in merged:
            for col, value in zip(cols, (s.stage, s.start, s.end, s.pid, s.tid, s.attrs), strict=True):
                col.append(value)  # type: ignore[attr-defined]
        return cols

    def rows(self) -> list[tuple[str, float, float, int, int, dict[str, Any]]]:
        """The stored spans as plain tuples (cheaper than :meth:`spans`; attrs not copied)."""
        return list(zip(*self.columns(), strict=True))

    def spans(self, stage: str | None = None) -> list[Span]:
        """A copy of the stored spans (recorded, then merged), optionally of one stage only."""
        cols, merged = self._copy()
        items = [Span(*row) for row in zip(*cols, strict=True)] + merged
        return items if stage is None else [s for s in items if s.stage == stage]

    def stages(self) -> dict[str, StageStats]:
        """Per-stage duration summaries of everything recorded."""
        by_stage: dict[str, list[float]] = {}
        for s in self.spans():
            by_stage.setdefault(s.stage, []).append(s.duration)
        return {name: summarize(d) for name, d in by_stage.items()}
