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

A loader's spans carry its identity: a thread working for one loader (a worker
thread, the thread that receives process workers' results) calls :func:`bind`
once with the loader's id, and every span it emits from then on carries
``owner=<id>``, so a measuring tool can tell a training loader's stages from a
validation loader's.

Loaders also publish their consumer side here: a loader's iterator passes each
``next()`` through :func:`step_hook` when one is installed, so a measuring
tool sees step boundaries on whichever thread consumes the loader without
patching the loader class.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

STAGE_NAMES = ("wait", "read", "decode", "transform", "collate", "pin", "h2d", "step")


class SpanSink(Protocol):
    """Receives finished spans. Must be thread-safe: workers emit concurrently."""

    def record(self, stage: str, start: float, end: float, attrs: dict[str, Any]) -> None: ...


class StepHook(Protocol):
    """Wraps one ``next()`` of a loader: ``fetch()`` returns the batch or raises StopIteration."""

    def __call__(self, owner: object, fetch: Callable[[], Any]) -> Any: ...


_sinks: list[SpanSink] = []
_step_hooks: list[StepHook] = []
_lock = threading.Lock()
_bound = threading.local()


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


def bind(owner: int | None) -> None:
    """File every span the calling thread emits from now on under ``owner`` (a loader's
    ``id()``; None: under nobody). A span given its own ``owner=`` keeps it."""
    _bound.owner = owner


def emit(stage: str, start: float, end: float, **attrs: Any) -> None:
    """Report a stage interval measured by the caller (perf_counter seconds)."""
    if not _sinks:
        return
    owner = getattr(_bound, "owner", None)
    if owner is not None and "owner" not in attrs:
        attrs["owner"] = owner
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


def install_step_hook(hook: StepHook) -> None:
    """Route every published loader ``next()`` through ``hook`` (the latest one wins)."""
    with _lock:
        if hook not in _step_hooks:
            _step_hooks.append(hook)


def uninstall_step_hook(hook: StepHook) -> None:
    """Stop routing through ``hook``; unknown hooks are ignored."""
    with _lock:
        if hook in _step_hooks:
            _step_hooks.remove(hook)


def step_hook() -> StepHook | None:
    """The installed step hook, or None (the loader then calls its own ``next`` directly)."""
    hooks = _step_hooks
    return hooks[-1] if hooks else None
