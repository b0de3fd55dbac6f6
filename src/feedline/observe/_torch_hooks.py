"""Hooks into torch, as one object: :class:`TorchHooks`.

A :class:`TorchHooks` patches torch classes in place between :meth:`install`
and :meth:`uninstall` (or inside :meth:`TorchHooks.installed`) and keeps every
original it replaced on itself; nothing lives at module level and nothing runs
at import. Hooks stack: a second object installed on top of the first wraps
its patches, and one removed out of order turns itself into a pass-through.

* Copies: ``Tensor.to`` / ``Tensor.cuda`` from CPU to CUDA are logged into a
  :class:`CopyLog` with bytes, pinned or pageable source, ``non_blocking`` and
  CUDA event times (resolved lazily).
* Fetches: each DataLoader batch fetch (``dataset[i]`` for the batch, then
  ``collate_fn``) gives a ``fetch`` span carrying its thread CPU time (the
  report splits it into blocked "read" and on-CPU "decode") and a ``collate``
  span, both labelled with the loader. In the consumer process they go to the
  sink; in worker processes a :class:`WorkerInit` (the loader's
  ``worker_init_fn`` for the duration of ``iter()``; picklable, so ``fork``,
  ``spawn`` and ``forkserver`` workers all run it before their fetcher is
  made) patches the worker's fetchers to write JSON lines into ``worker_dir``
  (:func:`read_worker_spans` collects them; perf_counter is CLOCK_MONOTONIC on
  Linux, so times line up across processes).
* Iteration: ``DataLoader.__iter__`` and the iterator's ``__next__`` are
  reported to the owner's ``on_iter`` / ``on_next`` callbacks (step clocks); so is
  the shutdown of a multiprocessing iterator's workers outside a ``next()`` (an
  iterator dropped before its end: ``it = iter(loader)`` again, a ``break``), to
  ``teardown``.
* Sampling: the iterator's draw of the next indices from the sampler (its
  ``_next_index``) runs in the consumer process whatever ``num_workers`` is;
  each draw inside a ``next()`` gives a ``sampler`` span labelled with the
  loader (the draws ``iter()`` makes to fill the workers' queues are start-up).
* The loop's own data work: from a batch's delivery (:meth:`TorchHooks.delivered`)
  to the first forward of a module with parameters (the model), a global forward
  pre-hook registered only for that stretch gives a ``loop_transform`` span (copies
  to the device left out): augmentation done on the batch in the training loop, which
  workers do not share. A thread whose batches a model on another thread takes (a
  producer feeding a queue) is not armed again.
* Checkpoints: each ``torch.save`` in the measured process gives a ``checkpoint`` span
  (time the loop blocked in a save is its own stage, as with feedline's Checkpointer).
* Updates: ``torch.optim`` optimizer steps and autograd backward passes
  (``torch.autograd.backward``, which ``Tensor.backward`` calls, and
  ``torch.autograd.grad``) are reported to ``optimizer_step`` / ``backward``
  (which loader feeds training, also for a hand-written update).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from feedline.children import LiveChildren
from feedline.observe._scratch import open_text
from feedline.observe._stats import Span


class Sink(Protocol):
    def record(self, stage: str, start: float, end: float, attrs: dict[str, Any]) -> None: ...


Deliver = Callable[[str, float, float, dict[str, Any]], None]
_INHERITED = object()  # marks an attribute a class inherited (restored by deleting the patch)

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


def copy_device(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The target device of a ``Tensor.to`` call as given (``"cuda:1"``, ``1``, a
    ``torch.device``, another tensor's device), or ``None`` (a dtype-only call)."""
    device = kwargs.get("device")
    if device is None and args:
        first = args[0]
        if hasattr(first, "is_pinned") and hasattr(first, "device"):
            device = first.device
        elif (isinstance(first, (str, int)) and not isinstance(first, bool)) or type(
            first
        ).__name__ == "device":
            device = first
    return device


def copy_target(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str | None, bool]:
    """The device type and ``non_blocking`` flag of a ``Tensor.to`` call.

    Handles ``to(device, ...)``, ``to(dtype, ...)``, ``to(other_tensor, ...)``
    and keyword forms; the first positional bool is ``non_blocking``.
    """
    device = copy_device(args, kwargs)
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

    def durations(self, wait: bool = True) -> list[float]:
        """Per-copy time: device time where measured (all of them if ``wait``), else host time."""
        self.resolve(wait=wait)
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


# ------------------------------------------------------------- CPU clocks ---


def sched_times() -> tuple[float, float]:
    """(CPU seconds, run-queue seconds) of the calling thread, from Linux schedstat.

    The run-queue delay is how long the thread waited for a core: CPU-bound
    work on a busy host is delayed by the scheduler, and counting that delay
    keeps a slow decode from looking like a slow read. Opens, reads and closes
    ``/proc/thread-self/schedstat`` (a few microseconds; nothing is kept open);
    elsewhere falls back to ``(time.thread_time(), 0.0)``.
    """
    try:
        fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
    except OSError:
        return time.thread_time(), 0.0
    try:
        parts = os.pread(fd, 128, 0).split()
        return int(parts[0]) / 1e9, int(parts[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return time.thread_time(), 0.0
    finally:
        os.close(fd)


def thread_runq() -> float:
    """Run-queue seconds of the calling thread (:func:`sched_times`)."""
    return sched_times()[1]


def runq_since(before: float) -> float:
    return max(0.0, thread_runq() - before)


def process_runq() -> dict[int, float]:
    """Run-queue seconds of every thread of this process, by thread id (a worker whose
    dataset decodes on its own thread pool: those threads wait for a core too)."""
    if threading.active_count() == 1:  # no thread of its own: the calling one is all
        return {threading.get_native_id(): sched_times()[1]}
    out: dict[int, float] = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            fd = os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY)
        except OSError:
            continue  # the thread ended
        try:
            out[int(tid)] = int(os.pread(fd, 128, 0).split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            continue
        finally:
            os.close(fd)
    return out


def process_runq_since(before: dict[int, float]) -> float:
    """Run-queue seconds this process's threads spent since ``before`` (a thread started
    since counts from its start)."""
    return sum(max(0.0, q - before.get(tid, 0.0)) for tid, q in process_runq().items())


ENDS_FIRST = 4
"""Fetches in the training process whose ended children are read at both ends (see
:func:`make_fetch`) before one reading a fetch, when none ended in them."""

RUNQ_EVERY = 8
"""On the consumer thread, every this many fetches also read the run-queue delay.

In-process fetches take their CPU time from ``time.thread_time()`` and sample
the run-queue delay; the report scales the sampled delay to the rest. Worker
processes, off the training thread, read it on every fetch.
"""


class _TimedCollate:
    """Wraps a fetcher's collate_fn and remembers the last call's start and end."""

    _feedline_timed = True

    def __init__(self, fn: Any, cpu_clock: Callable[[], float] = time.thread_time) -> None:
        from torch.utils.data._utils.collate import default_collate

        self.fn, self.cpu_clock = fn, cpu_clock
        self.may_drop = fn is not default_collate
        """torch's own collate returns every sample it is given: its batches are not counted."""
        self.last = (0.0, 0.0)
        self.cpu = (0.0, 0.0)
        self.given = self.dropped = 0
        """Samples the last call was given and did not return (a collate that filters out
        the ``None`` of samples that failed to load)."""

    def __call__(self, data: Any) -> Any:
        clock = self.cpu_clock
        t0, c0 = time.perf_counter(), clock()
        out = self.fn(data)
        self.last, self.cpu = (t0, time.perf_counter()), (c0, clock())
        given = self.given = len(data) if self.may_drop and isinstance(data, (list, tuple)) else 0
        if given:
            rows = batch_rows(out)
            self.dropped = given - rows if rows is not None and rows < given else 0
        else:
            self.dropped = 0
        return out


def batch_rows(batch: Any, depth: int = 0) -> int | None:
    """The samples in a collated batch (None when it cannot tell): ``None`` holds none, a
    tensor or array its first dimension, a dict or tuple its first member's, a list of
    plain values its length."""
    if batch is None:
        return 0
    shape = getattr(batch, "shape", None)
    if shape is not None:
        return int(shape[0]) if len(shape) >= 1 else None
    if depth >= 3:
        return None
    if isinstance(batch, dict):
        return batch_rows(next(iter(batch.values())), depth + 1) if batch else 0
    if isinstance(batch, (list, tuple)):
        if not batch:
            return 0
        first = batch[0]
        if isinstance(first, (dict, list, tuple)) or hasattr(first, "shape"):
            return batch_rows(first, depth + 1)
        return len(batch)
    return None


def make_fetch(orig: Any, deliver: Deliver, always_sample: bool,
               live: Callable[[], bool],
               cpu_clock: Callable[[], float] = time.thread_time,
               children: LiveChildren | None = None,
               runq: tuple[Callable[[], Any], Callable[[Any], float]] = (thread_runq, runq_since)
               ) -> Any:
    """A fetcher ``fetch`` that times items and collate and hands both spans to ``deliver``.

    ``live()`` false makes it a pass-through (a hook removed out of order).
    ``cpu_clock``: the CPU seconds a fetch is charged with; a worker process passes
    ``time.process_time`` (every thread of the worker: a dataset that decodes on its own
    thread pool is CPU work, not time blocked), the training process its thread's.
    The CPU of child processes that ended during the fetch (``os.times()``'s children: an
    external decoder the items waited for) is its ``child_cpu``: decoding, not I/O; so
    is the CPU that live children (``children``: a decoder process the dataset keeps, a
    ``ProcessPoolExecutor``'s processes, a ``Popen`` pipe) used while the fetch ran.
    ``runq``: reads the run-queue delay, and the delay since a reading (the calling
    thread's; a worker process passes every thread's, as its CPU clock counts them).

    Ended children are read once a fetch, at its end, against the reading at the end of
    the one before (each ``os.times()`` costs 5-15 us on a step's cold caches): in a worker
    process (``always_sample``) nothing runs between two fetches, so every change is the
    fetch's. In the training process the loop runs in between: the first
    :data:`ENDS_FIRST` fetches read both ends, and a change between two fetches seen later
    (children ended in the fetch or in the loop: the fetch's share is unknown, and left out)
    makes every later fetch read both ends.
    """
    runq_now, runq_delta = runq
    kept = children if children is not None else LiveChildren()
    counter = itertools.count()
    perf, times = time.perf_counter, os.times
    last_end: float | None = None  # ended children's CPU at the last fetch's end
    both_left = ENDS_FIRST  # fetches left that read both ends; -1: every one does

    def fetch(self: Any, index: Any) -> Any:
        if not live():
            return orig(self, index)
        col = self.collate_fn
        if not getattr(col, "_feedline_timed", False):
            col = self.collate_fn = _TimedCollate(col, cpu_clock)
        nonlocal last_end, both_left
        sampled = always_sample or next(counter) % RUNQ_EVERY == 0
        both = last_end is None or (both_left != 0 and not always_sample)
        if both:  # children that end during the fetch (ended and waited for)
            e = times()
            start = e[2] + e[3]
        else:
            start = last_end  # type: ignore[assignment]
        t0, cpu0, live0 = perf(), cpu_clock(), kept.start()
        q0 = runq_now() if sampled else None
        out = orig(self, index)
        live_cpu, procs = kept.stop(live0) if live0 else (0.0, 0)
        e = times()
        last_end = e[2] + e[3]
        ended_cpu = last_end - start
        if not always_sample:
            if both:
                if ended_cpu:
                    both_left = -1  # children end in fetches: read both ends of every one
                elif both_left > 0:
                    both_left -= 1
            elif ended_cpu:  # in this fetch or in the loop before it: unknown; both ends from now
                both_left, ended_cpu = -1, 0.0
        kids = ended_cpu + live_cpu
        queued = runq_delta(q0) if sampled else 0.0
        c_start, c_end = col.last
        k_start, k_end = col.cpu
        ran = c_start >= t0
        if not ran:  # collate did not run: the whole fetch is items
            c_start = c_end = perf()
            k_start = k_end = cpu_clock()
        attrs: dict[str, Any] = {"cpu": max(0.0, k_start - cpu0)}
        if kids > 0:
            attrs["child_cpu"] = kids
        if procs > 1:  # the items kept several processes busy at once (a pool)
            attrs["child_procs"] = procs
        if sampled:  # an unsampled fetch carries no runq: the report estimates it
            # the run-queue delay of the whole fetch, split by wall time (collate is its own stage)
            attrs["runq"] = queued * (c_start - t0) / max(c_end - t0, 1e-12)
        deliver("fetch", t0, c_start, attrs)
        col_attrs: dict[str, Any] = {"cpu": max(0.0, k_end - k_start)}
        if col.dropped and ran:  # this fetch's collate dropped samples
            col_attrs["dropped"], col_attrs["given"] = col.dropped, col.given
        deliver("collate", c_start, c_end, col_attrs)
        return out

    fetch._feedline_orig = orig  # type: ignore[attr-defined]
    return fetch


def _root(fn: Any) -> Any:
    while hasattr(fn, "_feedline_orig"):
        fn = fn._feedline_orig
    return fn


def _fetcher_classes() -> tuple[Any, ...]:
    from torch.utils.data._utils import fetch as fetch_mod

    return fetch_mod._MapDatasetFetcher, fetch_mod._IterableDatasetFetcher


ARM_FIRST = 32
"""Batches per consumer thread whose stretch from delivery to the model's forward is
timed every time (the ``loop_transform`` stage); after them, one in :data:`ARM_EVERY`."""
ARM_EVERY = 8
"""Past :data:`ARM_FIRST`, a batch's loop work is timed with probability 1/ARM_EVERY (drawn,
so that a loop with a period cannot alias with it), its span carrying ``every``: the
batches it stands for. Timing it registers a global forward pre-hook until the model's
first forward (about 10 us of torch's slow module call on each timed step); a ``report``
weighs the spans back."""


# ---------------------------------------------------------------- workers ---


class WorkerInit:
    """A DataLoader ``worker_init_fn`` that times the worker's fetches into ``worker_dir``.

    Picklable (a plain object of a module-level class), so it reaches workers
    started with ``fork``, ``spawn`` or ``forkserver``. It replaces the worker's
    fetcher ``fetch`` (an inherited consumer-side patch included) with one that
    writes ``[stage, start, end, pid, tid, attrs]`` JSON lines to
    ``worker_dir/worker-<pid>.jsonl``, then calls the user's own ``inner``.
    """

    def __init__(self, inner: Callable[[int], Any] | None, worker_dir: str, loader: str) -> None:
        self.inner, self.worker_dir, self.loader = inner, worker_dir, loader

    def __call__(self, worker_id: int) -> None:
        path = Path(self.worker_dir) / f"worker-{os.getpid()}.jsonl"
        lock = threading.Lock()
        base = {"worker": worker_id, "loader": self.loader}

        def deliver(stage: str, start: float, end: float, attrs: dict[str, Any]) -> None:
            line = json.dumps([stage, start, end, os.getpid(), threading.get_ident(), attrs | base])
            with lock, open_text(path, "a") as fh:  # its folder made again if removed
                fh.write(line + "\n")

        for cls in _fetcher_classes():
            cls.fetch = make_fetch(_root(cls.fetch), deliver, True, lambda: True, time.process_time,
                                   runq=(process_runq, process_runq_since))
        if self.inner is not None:
            self.inner(worker_id)


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


# ------------------------------------------------------------------ hooks ---


@dataclass
class HookTargets:
    """Where :class:`TorchHooks` reports.

    ``sink`` gets consumer-side spans; ``copies`` the host-to-device copies;
    ``on_next(loader, fetch)`` runs one ``next()`` of a DataLoader (returns the
    batch); ``on_iter(loader, t0, t1, it)`` is told of each ``iter()`` (``it``: the
    iterator it made);
    ``label(loader)`` names a loader; ``current()`` is the label of the loader
    the calling thread is fetching from (None: none); ``worker_dir`` receives
    worker-process spans (None: workers are not timed); ``forked()``, when given,
    is called once in a process forked from the measured one (a
    ``multiprocessing.Process`` trainer; loader workers never iterate a
    DataLoader) at its first ``iter(DataLoader)``, to start measuring it;
    ``optimizer_step()``, when given, is called after every ``torch.optim``
    optimizer step in the measured process (on the thread that stepped);
    ``backward()``, when given, after every autograd backward pass there
    (``Tensor.backward``, ``torch.autograd.backward`` or ``torch.autograd.grad``:
    a loop that updates its parameters by hand, ``p.data -= lr * p.grad``, steps
    no optimizer); ``owner(loader)``, when given, names what a new iterator of
    ``loader`` is reported as (``loader`` itself, or a stand-in for a data path of
    its own: an evaluation pass nested in the loader's training pass);
    ``teardown(loader, t0, t1)``, when given, is told when a multiprocessing
    iterator of ``loader`` shut its workers down from ``t0`` to ``t1`` outside its
    ``next()`` (dropped before its end, on the thread that dropped it).
    """

    sink: Sink
    copies: CopyLog
    on_next: Callable[[Any, Callable[[], Any]], Any]
    on_iter: Callable[[Any, float, float, Any], None]
    label: Callable[[Any], str]
    current: Callable[[], str | None]
    worker_dir: str | None = None
    forked: Callable[[], None] | None = None
    optimizer_step: Callable[[], None] | None = None
    backward: Callable[[], None] | None = None
    owner: Callable[[Any], Any] | None = None
    teardown: Callable[[Any, float, float], None] | None = None


class TorchHooks:
    """Every torch patch of one measuring session; see the module docstring.

    ``replay`` (a dict ``id(cpu tensor) -> (cpu tensor, device tensor)``), when
    set, serves repeated copies of the same host tensor from the device tensor
    kept from the first one (the synthetic-batch check).
    """

    def __init__(self, targets: HookTargets) -> None:
        self.t = targets
        self.replay: dict[int, tuple[Any, Any]] | None = None
        self._saved: list[tuple[Any, str, Any, Any]] = []  # (owner, name, original, patch)
        self._handles: list[Any] = []  # torch hook handles, removed on uninstall
        self._live = False
        self._pid = os.getpid()
        self._forked = False  # this copy of the object lives in a process forked from its own
        ref = weakref.ref(self)

        def forked() -> None:  # set here, not read with os.getpid() on every hook (a syscall)
            hooks = ref()
            if hooks is not None:
                hooks._forked = True

        os.register_at_fork(after_in_child=forked)
        self._forked_pid: int | None = None
        self._worker_pids: set[int] = set()  # loader workers: not a dataset's own children
        self._children = LiveChildren(skip=lambda: self._worker_pids)
        self._tls = threading.local()  # ``pending``: (loader, delivered at, copy seconds since)
        self._armed: set[int] = set()  # threads with a batch not yet given to a model
        self._handing: set[int] = set()  # threads whose batches a model on another thread takes
        self._fwd: Any = None  # the global forward pre-hook's handle while armed
        self._register_fwd: Callable[[Any], Any] | None = None  # torch's, found at install
        self._draw = random.Random(0).random  # which deliveries past ARM_FIRST are timed
        self._weighted: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()
        """Whether a module has parameters, by module: ``next(module.parameters())`` walks its
        submodules (about 20 us for a small model), too dear for every step."""

    @property
    def worker_pids(self) -> set[int]:
        """The DataLoader worker processes started so far (their fetches are timed in them)."""
        return self._worker_pids

    @contextmanager
    def installed(self) -> Iterator[TorchHooks]:
        """Install for the ``with`` body, then restore torch."""
        self.install()
        try:
            yield self
        finally:
            self.uninstall()

    def install(self) -> None:
        """Patch torch (idempotent)."""
        if self._live:
            return
        import torch
        from torch.utils.data import dataloader as dl
        from torch.utils.data._utils import pin_memory as pin_mod

        self._live = True
        from torch.nn.modules import module as module_mod

        self._register_fwd = getattr(module_mod, "register_module_forward_pre_hook", None)
        self._patch(torch.Tensor, "to", self._make_to(torch.Tensor.to))
        self._patch(torch.Tensor, "cuda", self._make_cuda(torch.Tensor.cuda))
        for cls in _fetcher_classes():
            self._patch(cls, "fetch", make_fetch(cls.fetch, self._deliver, False, self._here,
                                                 children=self._children))
        # the DataLoader's pin-memory thread looks this module global up on every batch
        self._patch(pin_mod, "pin_memory", self._make_pin(pin_mod.pin_memory))
        self._patch(dl.DataLoader, "__iter__", self._make_iter(dl.DataLoader.__iter__))
        self._patch(dl._BaseDataLoaderIter, "__next__", self._make_next(dl._BaseDataLoaderIter.__next__))
        shutdown = getattr(dl._MultiProcessingDataLoaderIter, "_shutdown_workers", None)
        if self.t.teardown is not None and shutdown is not None:
            self._patch(dl._MultiProcessingDataLoaderIter, "_shutdown_workers",
                        self._make_shutdown(shutdown))
        if hasattr(dl._BaseDataLoaderIter, "_next_index"):
            self._patch(dl._BaseDataLoaderIter, "_next_index",
                        self._make_next_index(dl._BaseDataLoaderIter._next_index))
        self._patch(torch, "save", self._make_save(torch.save))
        if self.t.optimizer_step is not None:
            from torch.optim import optimizer as optim_mod

            register = getattr(optim_mod, "register_optimizer_step_post_hook", None)
            if register is not None:
                self._handles.append(register(self._optimizer_stepped))
        if self.t.backward is not None:
            import torch.autograd as autograd_mod

            # Tensor.backward looks torch.autograd.backward up on every call
            for name in ("backward", "grad"):
                self._patch(autograd_mod, name, self._make_backward(getattr(autograd_mod, name)))

    def uninstall(self) -> None:
        """Restore every patched attribute that still holds this object's patch."""
        self._live = False
        self._disarm()
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        for owner, name, orig, patch in reversed(self._saved):
            if vars(owner).get(name) is not patch:
                continue  # another session patched on top of ours: ours now passes through
            if orig is _INHERITED:
                delattr(owner, name)
            else:
                setattr(owner, name, orig)
        self._saved.clear()

    def _patch(self, owner: Any, name: str, patch: Any) -> None:
        self._saved.append((owner, name, vars(owner).get(name, _INHERITED), patch))
        setattr(owner, name, patch)

    def _here(self) -> bool:
        return self._live and not self._forked

    def _optimizer_stepped(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.t.optimizer_step is not None and self._here():
            self.t.optimizer_step()

    # -- the loop's work on a batch before the model sees it
    def delivered(self, label: str, t: float) -> None:
        """A batch of loader ``label`` reached the loop at ``t`` on this thread: time what
        the loop does with it before the model's first forward (:meth:`_forward_pre`).
        The global forward pre-hook is registered only until then: with no global hook a
        module call takes torch's fast path, so the model's own calls cost nothing."""
        if not self._here():
            return
        tid = threading.get_ident()
        if tid in self._handing:
            return
        tls = self._tls
        if tid not in self._armed:  # (armed: a step of several draws; its last one counts)
            n = getattr(tls, "delivered", 0) + 1
            tls.delivered = n
            if n > ARM_FIRST and self._draw() >= 1.0 / ARM_EVERY:
                return  # not sampled: this batch's loop work goes untimed
            tls.every = ARM_EVERY if n > ARM_FIRST else 0
        tls.pending = (label, t, 0.0)
        self._armed.add(tid)
        if self._fwd is None and self._register_fwd is not None:
            self._fwd = self._register_fwd(self._forward_pre)

    def _forward_pre(self, module: Any, args: Any) -> None:
        if not self._here():  # a worker forked while armed, or after uninstall: never ours
            self._disarm()
            return
        pending = getattr(self._tls, "pending", None)
        try:
            weighted = self._weighted[module]
        except (KeyError, TypeError):  # TypeError: a module that cannot be weakly referenced
            weighted = next(module.parameters(), None) is not None
            try:
                self._weighted[module] = weighted
            except TypeError:
                pass
        if not weighted:
            return  # a module without weights (an augmentation): the loop's work goes on
        if pending is None:
            # the model runs on a thread that took no batch: the armed threads hand their
            # batches over (a producer thread feeding a queue); they are not armed again,
            # so the model's module calls keep torch's fast path
            self._handing |= self._armed
            self._armed.clear()
            self._disarm()
            return
        self._tls.pending = None
        self._armed.discard(threading.get_ident())
        if not self._armed:
            self._disarm()
        label, t, copied = pending
        attrs: dict[str, Any] = {"loader": label}
        every = getattr(self._tls, "every", 0)
        if every:  # a sampled batch: it stands for this many
            attrs["every"] = every
        self.t.sink.record("loop_transform", t + copied, max(t + copied, time.perf_counter()), attrs)

    def _disarm(self) -> None:
        handle, self._fwd = self._fwd, None
        if handle is not None:
            handle.remove()
        if os.getpid() != self._pid:
            self._armed.clear()

    # -- delivery
    def _deliver(self, stage: str, start: float, end: float, attrs: dict[str, Any]) -> None:
        label = self.t.current()
        if label is not None:
            attrs["loader"] = label
        self.t.sink.record(stage, start, end, attrs)

    # -- patches
    def _make_iter(self, orig: Any) -> Any:
        hooks = self

        def dl_iter(loader: Any) -> Any:
            if not hooks._here():
                pid = os.getpid()
                if hooks._live and hooks.t.forked is not None and hooks._forked_pid != pid:
                    hooks._forked_pid = pid  # once per forked process
                    hooks.t.forked()  # installs a new session's hooks on top of these
                    from torch.utils.data import dataloader as dl

                    return dl.DataLoader.__iter__(loader)  # through them, back here, to torch
                return orig(loader)
            t0 = time.perf_counter()
            owner = hooks.t.owner(loader) if hooks.t.owner is not None else loader
            inner = loader.worker_init_fn
            wrap = (hooks.t.worker_dir is not None and loader.num_workers > 0
                    and not isinstance(inner, WorkerInit))
            if wrap:  # read once by the multiprocessing iterator as it starts its workers
                loader.worker_init_fn = WorkerInit(inner, str(hooks.t.worker_dir),
                                                   hooks.t.label(owner))
            try:
                it = orig(loader)
            finally:
                if wrap:
                    loader.worker_init_fn = inner
            it._feedline_owner = owner
            hooks._worker_pids.update(w.pid for w in getattr(it, "_workers", ()) if w.pid)
            hooks.t.on_iter(owner, t0, time.perf_counter(), it)
            return it

        return dl_iter

    def _make_next(self, orig: Any) -> Any:
        hooks = self

        def dl_next(it: Any) -> Any:
            owner = getattr(it, "_feedline_owner", None)
            if owner is None or not hooks._here():
                return orig(it)
            return hooks.t.on_next(owner, lambda: orig(it))

        return dl_next

    def _make_shutdown(self, orig: Any) -> Any:
        hooks = self

        def shutdown_workers(it: Any) -> Any:
            owner = getattr(it, "_feedline_owner", None)
            if owner is None or getattr(it, "_shutdown", True) or not hooks._here():
                return orig(it)  # not ours, or already shut down: nothing to time
            t0 = time.perf_counter()
            try:
                return orig(it)
            finally:
                if hooks.t.teardown is not None:
                    hooks.t.teardown(owner, t0, time.perf_counter())

        return shutdown_workers

    def _make_next_index(self, orig: Any) -> Any:
        hooks = self

        def next_index(it: Any) -> Any:
            label = hooks.t.current() if hooks._here() else None
            if label is None:  # outside a next(): iter()'s start-up draws, or not measured
                return orig(it)
            t0 = time.perf_counter()
            try:
                return orig(it)
            finally:
                hooks.t.sink.record("sampler", t0, time.perf_counter(), {"loader": label})

        return next_index

    def _make_pin(self, orig: Any) -> Any:
        hooks, depth = self, threading.local()

        def pin_memory(data: Any, *args: Any, **kwargs: Any) -> Any:
            if getattr(depth, "n", 0) or not hooks._here():  # torch recurses: time the outer call
                return orig(data, *args, **kwargs)
            depth.n = 1
            t0 = time.perf_counter()
            try:
                out = orig(data, *args, **kwargs)
            finally:
                depth.n = 0
            hooks.t.sink.record("pin", t0, time.perf_counter(), {})
            return out

        return pin_memory

    def _h2d(self, orig: Any, tensor: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
             non_blocking: bool, device: Any) -> Any:
        """Time one host-to-device copy; ``device`` is its target as the call gave it (``None``:
        the current device). The events go on the current stream of that device, where
        PyTorch runs the copy (``to("cuda:1")`` with cuda:0 current runs on cuda:1)."""
        cache = self.replay
        if cache is not None:
            hit = cache.get(id(tensor))
            if hit is not None and hit[0] is tensor:
                return hit[1]
        import torch

        events = None
        stream = None
        if torch.cuda.is_available():
            stream = torch.cuda.current_stream(device)
            events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            events[0].record(stream)
        t0 = time.perf_counter()
        out = orig(tensor, *args, **kwargs)
        t1 = time.perf_counter()
        if events is not None:
            events[1].record(stream)
        if cache is not None:
            cache[id(tensor)] = (tensor, out)
            return out
        pending = getattr(self._tls, "pending", None)
        if pending is not None:  # a copy before the model's forward is h2d, not the loop's work
            self._tls.pending = (pending[0], pending[1], pending[2] + (t1 - t0))
        rec = CopyRecord(t0, t1, int(tensor.numel() * tensor.element_size()),
                         bool(tensor.is_pinned()), non_blocking, None, events)
        self.t.copies.add(rec)
        self.t.sink.record("h2d", t0, t1, {"bytes": rec.nbytes, "pinned": rec.pinned,
                                           "non_blocking": non_blocking})
        return out

    def _make_backward(self, orig: Any) -> Any:
        hooks = self

        def backward(*args: Any, **kwargs: Any) -> Any:
            out = orig(*args, **kwargs)
            if hooks.t.backward is not None and hooks._here():
                hooks.t.backward()
            return out

        return backward

    def _make_save(self, orig: Any) -> Any:
        hooks = self

        def save(*args: Any, **kwargs: Any) -> Any:
            if not hooks._here():
                return orig(*args, **kwargs)
            t0 = time.perf_counter()
            try:
                return orig(*args, **kwargs)
            finally:  # the loop blocked in a checkpoint save: its own stage, not compute
                hooks.t.sink.record("checkpoint", t0, time.perf_counter(), {"via": "torch.save"})

        save._feedline_orig = orig  # type: ignore[attr-defined]
        return save

    def _make_to(self, orig: Any) -> Any:
        hooks = self

        def to(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if not hooks._live or tensor.device.type != "cpu":
                return orig(tensor, *args, **kwargs)
            target, non_blocking = copy_target(args, kwargs)
            if target != "cuda":
                return orig(tensor, *args, **kwargs)
            return hooks._h2d(orig, tensor, args, kwargs, non_blocking, copy_device(args, kwargs))

        return to

    def _make_cuda(self, orig: Any) -> Any:
        hooks = self

        def cuda(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if not hooks._live or tensor.device.type != "cpu":
                return orig(tensor, *args, **kwargs)
            non_blocking = bool(kwargs.get("non_blocking", len(args) > 1 and bool(args[1])))
            device = kwargs.get("device", args[0] if args else None)
            return hooks._h2d(orig, tensor, args, kwargs, non_blocking, device)

        return cuda
