"""The stage-span hook: the one way any stage reports its time.

A leaf module: importing it loads nothing else of feedline, so ``io``,
``format`` and ``pipeline`` report through it without loading ``observe``.

Stages call :func:`span` (a context manager) or :func:`emit` (an already-timed
interval). Nothing is recorded unless a sink is installed with :func:`install`,
so the cost when nobody listens is one list check. Times are
``time.perf_counter()`` seconds on the host; GPU work is timed with CUDA
events by the observe package, never with these host clocks.

Canonical stage names (use these so reports line up):
``wait`` (consumer blocked on the next batch), ``read``, ``decode``,
``transform``, ``collate``, ``pin``, ``h2d``, ``step``. Reports show any
other stage name emitted here (``checkpoint``, for example) as its own line.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

STAGE_NAMES = ("wait", "read", "decode", "transform", "collate", "pin", "h2d", "step")


class SpanSink(Protocol):
    """Receives finished spans. Must be thread-safe: workers emit concurrently."""

    def record(self, stage: str, start: float, end: float, attrs: dict[str, Any]) -> None: ...


_sinks: list[SpanSink] = []
_lock = threading.Lock()


def install(sink: SpanSink) -> None:
    """Start sending spans to ``sink`` (idempotent for the same object)."""
    with _lock:
        if sink not in _sinks:
            _sinks.append(sink)


def uninstall(sink: SpanSink) -> None:
    """Stop sending spans to ``sink``; unknown sinks are ignored."""
    with _lock:
        if sink in _sinks:
            _sinks.remove(sink)


def active() -> bool:
    """True when at least one sink listens (stages may skip timing otherwise)."""
    return bool(_sinks)


def emit(stage: str, start: float, end: float, **attrs: Any) -> None:
    """Report a stage interval measured by the caller (perf_counter seconds)."""
    for sink in tuple(_sinks):
        sink.record(stage, start, end, attrs)


@contextmanager
def span(stage: str, **attrs: Any) -> Iterator[None]:
    """Time the ``with`` body as one interval of ``stage``."""
    if not _sinks:
        yield
        return
    start = time.perf_counter()
    try:
        yield
    finally:
        emit(stage, start, time.perf_counter(), **attrs)
