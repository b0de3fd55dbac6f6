"""Hooks into torch: host-to-device copies and DataLoader fetch/collate timing.

Both hooks patch torch classes in place while at least one listener is
installed and restore the originals when the last one leaves. They import
torch lazily (only ``install_*`` touches it).

* Copy hook: ``Tensor.to`` / ``Tensor.cuda`` from CPU to CUDA are logged with
  bytes, pinned or pageable source, the ``non_blocking`` flag, host time and
  device time (CUDA events, resolved lazily). Non-H2D calls pass straight
  through after one device check.
* Fetch hook: each DataLoader batch fetch (``dataset[i]`` for the batch, then
  ``collate_fn``) emits a ``fetch`` span carrying its thread CPU time (the
  report splits it into off-CPU "read" and on-CPU "decode") and a ``collate``
  span. In a worker process the spans go to a JSON-lines file per worker in
  ``worker_dir`` (:func:`read_worker_spans` collects them; perf_counter is
  CLOCK_MONOTONIC on Linux, so times line up across processes).
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from feedline import spans
from feedline.observe._stats import Span

_lock = threading.Lock()


# ----------------------------------------------------------------- copies ---


@dataclass
class CopyRecord:
    """One host-to-device copy."""

    start: float
    end: float
    nbytes: int
    pinned: bool
    non_blocking: bool
    device_s: float | None = None
    events: Any = field(default=None, repr=False)


def copy_target(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str | None, bool]:
    """The device type and ``non_blocking`` flag of a ``Tensor.to`` call.

    Handles ``to(device, ...)``, ``to(dtype, ...)``, ``to(other_tensor, ...)``
    and keyword forms; the first positional bool is ``non_blocking``.
    """
    device = kwargs.get("device")
    if device is None and args:
        first = args[0]
        if hasattr(first, "is_pinned") and hasattr(first, "device"):
            device = first.device
        elif (isinstance(first, (str, int)) and not isinstance(first, bool)) or type(
            first
        ).__name__ == "device":
            device = first
    non_blocking = bool(kwargs.get("non_blocking", False))
    if "non_blocking" not in kwargs:
        non_blocking = next((a for a in args if isinstance(a, bool)), False)
    if device is None:
        return None, non_blocking
    if isinstance(device, int):
        return "cuda", non_blocking
    if isinstance(device, str):
        return device.split(":", 1)[0], non_blocking
    return str(getattr(device, "type", device)), non_blocking


class CopyLog:
    """Collects :class:`CopyRecord` s; resolves CUDA event times lazily."""

    def __init__(self) -> None:
        self.records: list[CopyRecord] = []
        self._lock = threading.Lock()

    def add(self, rec: CopyRecord) -> None:
        with self._lock:
            self.records.append(rec)

    def resolve(self, wait: bool = False) -> None:
        """Fill ``device_s`` of copies whose end event completed (all if ``wait``)."""
        with self._lock:
            for rec in self.records:
                if rec.events is None:
                    continue
                start, end = rec.events
                if wait:
                    end.synchronize()
                elif not end.query():
                    continue
                rec.device_s = start.elapsed_time(end) / 1000.0
                rec.events = None

    def durations(self) -> list[float]:
        """Per-copy time: device time where measured, else host time."""
        self.resolve(wait=True)
        return [r.device_s if r.device_s is not None else r.end - r.start for r in self.records]

    def summary(self) -> dict[str, int]:
        """Counts the findings need: pinned / pageable / blocking-from-pinned copies."""
        with self._lock:
            recs = list(self.records)
        return {
            "count": len(recs),
            "bytes": sum(r.nbytes for r in recs),
            "pinned": sum(1 for r in recs if r.pinned),
            "pageable": sum(1 for r in recs if not r.pinned),
            "non_blocking": sum(1 for r in recs if r.non_blocking),
            "blocking_from_pinned": sum(1 for r in recs if r.pinned and not r.non_blocking),
        }


_copy_logs: list[CopyLog] = []
_orig_copy: dict[str, Any] = {}
_replay: dict[int, tuple[Any, Any]] | None = None


def set_replay_cache(cache: dict[int, tuple[Any, Any]] | None) -> None:
    """During the synthetic-batch replay: map ``id(cpu_tensor) -> (cpu_tensor, device_tensor)``.

    While set, a cached tensor's ``.to(cuda)`` returns the device tensor kept
    from the first replay (no copy), and new H2D results are added to it.
    """
    global _replay
    _replay = cache


def _h2d(orig: Any, tensor: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
         non_blocking: bool) -> Any:
    cache = _replay
    if cache is not None:
        hit = cache.get(id(tensor))
        if hit is not None and hit[0] is tensor:
            return hit[1]
    import torch

    events = None
    if torch.cuda.is_available():
        events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        events[0].record()
    t0 = time.perf_counter()
    out = orig(tensor, *args, **kwargs)
    t1 = time.perf_counter()
    if events is not None:
        events[1].record()
    if cache is not None:
        cache[id(tensor)] = (tensor, out)
        return out
    rec = CopyRecord(t0, t1, int(tensor.numel() * tensor.element_size()),
                     bool(tensor.is_pinned()), non_blocking, None, events)
    for log in tuple(_copy_logs):
        log.add(rec)
    spans.emit("h2d", t0, t1, bytes=rec.nbytes, pinned=rec.pinned, non_blocking=non_blocking)
    return out


def _patched_to(self: Any, *args: Any, **kwargs: Any) -> Any:
    orig = _orig_copy["to"]
    if not _copy_logs or self.device.type != "cpu":
        return orig(self, *args, **kwargs)
    target, non_blocking = copy_target(args, kwargs)
    if target != "cuda":
        return orig(self, *args, **kwargs)
    return _h2d(orig, self, args, kwargs, non_blocking)


def _patched_cuda(self: Any, *args: Any, **kwargs: Any) -> Any:
    orig = _orig_copy["cuda"]
    if not _copy_logs or self.device.type != "cpu":
        return orig(self, *args, **kwargs)
    non_blocking = bool(kwargs.get("non_blocking", len(args) > 1 and bool(args[1])))
    return _h2d(orig, self, args, kwargs, non_blocking)


def install_copy_hook(log: CopyLog) -> None:
    """Log every CPU->CUDA ``Tensor.to`` / ``Tensor.cuda`` into ``log``."""
    import torch

    with _lock:
        if not _orig_copy:
            _orig_copy["to"] = torch.Tensor.to
            _orig_copy["cuda"] = torch.Tensor.cuda
            torch.Tensor.to = _patched_to  # type: ignore[method-assign]
            torch.Tensor.cuda = _patched_cuda  # type: ignore[method-assign]
        if log not in _copy_logs:
            _copy_logs.append(log)


def uninstall_copy_hook(log: CopyLog) -> None:
    """Stop logging into ``log``; the last one out restores torch."""
    import torch

    with _lock:
        if log in _copy_logs:
            _copy_logs.remove(log)
        if not _copy_logs and _orig_copy:
            torch.Tensor.to = _orig_copy.pop("to")  # type: ignore[method-assign]
            torch.Tensor.cuda = _orig_copy.pop("cuda")  # type: ignore[method-assign]


# ---------------------------------------------------------------- fetches ---

_fetch_users = 0
_orig_fetch: dict[Any, Any] = {}
_worker_dir: str | None = None
_worker_files: dict[int, Any] = {}


class _TimedCollate:
    """Wraps a fetcher's collate_fn and remembers the last call's start and end."""

    _feedline_timed = True

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.last = (0.0, 0.0)

    def __call__(self, data: Any) -> Any:
        t0 = time.perf_counter()
        out = self.fn(data)
        self.last = (t0, time.perf_counter())
        return out


@functools.cache
def _get_worker_info() -> Any:
    from torch.utils.data import get_worker_info

    return get_worker_info


def _worker_info() -> Any:
    """torch's ``get_worker_info()`` (imported once: this runs twice per fetch)."""
    return _get_worker_info()()


def _deliver(stage: str, start: float, end: float, **attrs: Any) -> None:
    info = _worker_info()
    if info is None:
        spans.emit(stage, start, end, **attrs)
        return
    if _worker_dir is None:
        return  # a worker of a loader nobody diagnoses: nothing listens
    pid = os.getpid()
    fh = _worker_files.get(pid)
    if fh is None:
        fh = open(Path(_worker_dir) / f"worker-{pid}.jsonl", "a", encoding="utf-8")  # noqa: SIM115
        _worker_files[pid] = fh
    attrs["worker"] = info.id
    fh.write(json.dumps([stage, start, end, pid, threading.get_ident(), attrs]) + "\n")
    fh.flush()


_sched_tls = threading.local()


class _SchedFile:
    """A thread's open schedstat file, closed when the thread (and its locals) go."""

    __slots__ = ("fd",)

    def __init__(self) -> None:
        try:
            self.fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        except OSError:
            self.fd = -1

    def __del__(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)


def _forget_sched_fd() -> None:
    # A forked child inherits the forking thread's descriptor, which names the
    # parent's thread: close the child's copy and open its own on next use.
    _sched_tls.fd = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_sched_fd)


def sched_times() -> tuple[float, float]:
    """(CPU seconds, run-queue seconds) of the calling thread, from Linux schedstat.

    The run-queue delay is how long the thread waited for a core: CPU-bound
    work on a busy host is delayed by the scheduler, and counting that delay
    keeps a slow decode from looking like a slow read. One ``pread`` on a
    per-thread descriptor (dropped in a forked child); elsewhere falls back to
    ``(time.thread_time(), 0.0)``.
    """
    held = getattr(_sched_tls, "fd", None)
    if held is None:
        held = _sched_tls.fd = _SchedFile()
    fd = held.fd
    if fd >= 0:
        try:
            parts = os.pread(fd, 128, 0).split()
            return int(parts[0]) / 1e9, int(parts[1]) / 1e9
        except (OSError, IndexError, ValueError):
            pass  # fall through to the portable clock
    return time.thread_time(), 0.0


RUNQ_EVERY = 8
"""On the training thread, every this many fetches also read the run-queue delay.

Reading schedstat costs a few microseconds warm but tens after the thread has
slept (the common case: the host waited on the device), so in-process fetches
take their CPU time from ``time.thread_time()`` and sample the run-queue delay;
the report scales the sampled delay to the rest. Worker processes, off the
training thread, read it on every fetch.
"""

_fetches = itertools.count()


def _cpu_only() -> tuple[float, float]:
    """The unsampled clock: thread CPU seconds, no run-queue reading."""
    return time.thread_time(), 0.0


def _make_fetch(orig: Any) -> Any:
    def fetch(self: Any, index: Any) -> Any:
        col = self.collate_fn
        if not getattr(col, "_feedline_timed", False):
            col = self.collate_fn = _TimedCollate(col)
        sampled = _worker_info() is not None or next(_fetches) % RUNQ_EVERY == 0
        clock = sched_times if sampled else _cpu_only
        t0 = time.perf_counter()
        c0, q0 = clock()
        out = orig(self, index)
        c1, q1 = clock()
        c_start, c_end = col.last
        if c_start < t0:  # collate did not run (should not happen): whole fetch is items
            c_start = c_end = time.perf_counter()
        # CPU and queueing of the whole fetch, collate included; the report counts
        # collate as CPU work, so the fetch keeps the share of its own wall time.
        wall = max(c_end - t0, 1e-12)
        share = (c_start - t0) / wall
        attrs = {"cpu": max(0.0, c1 - c0) * share}
        if sampled:  # an unsampled fetch carries no runq: the report estimates it
            attrs["runq"] = max(0.0, q1 - q0) * share
        _deliver("fetch", t0, c_start, **attrs)
        _deliver("collate", c_start, c_end)
        return out

    fetch._feedline_orig = orig  # type: ignore[attr-defined]
    return fetch


_pin_depth = threading.local()


def _make_pin(orig: Any) -> Any:
    def pin_memory(data: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(_pin_depth, "n", 0):  # torch recurses through this global: time the outer call
            return orig(data, *args, **kwargs)
        _pin_depth.n = 1
        t0 = time.perf_counter()
        try:
            out = orig(data, *args, **kwargs)
        finally:
            _pin_depth.n = 0
        _deliver("pin", t0, time.perf_counter())
        return out

    return pin_memory


def install_fetch_hooks(worker_dir: str | Path | None) -> None:
    """Time DataLoader fetch + collate; worker-process spans go to ``worker_dir``.

    Install before ``iter(loader)`` so forked workers inherit the hook.
    """
    global _fetch_users, _worker_dir
    from torch.utils.data._utils import fetch as fetch_mod
    from torch.utils.data._utils import pin_memory as pin_mod

    with _lock:
        _fetch_users += 1
        if worker_dir is not None:
            _worker_dir = str(worker_dir)
        if _orig_fetch:
            return
        for cls in (fetch_mod._MapDatasetFetcher, fetch_mod._IterableDatasetFetcher):
            _orig_fetch[cls] = cls.fetch
            setattr(cls, "fetch", _make_fetch(cls.fetch))  # noqa: B010
        # the DataLoader's pin-memory thread looks this module global up on every batch
        _orig_fetch[pin_mod] = pin_mod.pin_memory
        pin_mod.pin_memory = _make_pin(pin_mod.pin_memory)


def uninstall_fetch_hooks() -> None:
    """Undo one :func:`install_fetch_hooks`; the last one restores torch."""
    global _fetch_users
    from torch.utils.data._utils import pin_memory as pin_mod

    with _lock:
        _fetch_users = max(0, _fetch_users - 1)
        if _fetch_users == 0:
            for owner, orig in _orig_fetch.items():
                setattr(owner, "pin_memory" if owner is pin_mod else "fetch", orig)
            _orig_fetch.clear()


def read_worker_spans(worker_dir: str | Path) -> list[Span]:
    """All spans worker processes wrote into ``worker_dir`` (partial last lines skipped)."""
    out: list[Span] = []
    for path in sorted(Path(worker_dir).glob("worker-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                out.append(Span.from_list(json.loads(line)))
            except (ValueError, IndexError, TypeError):
                continue  # a worker killed mid-write leaves a partial line
    return out
