"""The running parts of a loader: slot pool, transfer engine, worker pool.

:class:`Runtime` owns every resource a loader holds (threads, processes,
shared memory, pinned slots) and turns a :class:`~feedline.pipeline.jobs.Job`
into a :class:`Ready` batch: fill a slot following the batch plan, start the
transfer. The first job is the *probe* (batch 0 of the plan): it runs in a
worker like any other (so a crash, an ``os._exit`` or a hang in it is a
``WorkerDied`` / ``LoaderTimeout``, never the training process's death), and
its samples decide the layout; the plan (:mod:`feedline.pipeline.plan`) is made
from it once and shared with every worker. It holds no reference to the
:class:`~feedline.pipeline.loader.Loader`, so a loader dropped without ``close()`` is
closed on the closer thread (:mod:`feedline.pipeline._dropped`).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from feedline import spans
from feedline.cores import usable_cores
from feedline.errors import ConfigError, FeedlineError
from feedline.pipeline import collate, nested, shm
from feedline.pipeline.auto import AutoChoice, thread_clock
from feedline.pipeline.device_decode import DeviceDecode
from feedline.pipeline.gauges import Gauges
from feedline.pipeline.jobs import Context, Job, prepare, run_collate
from feedline.pipeline.main_script import (
    main_references,
    refuse_while_bootstrapping,
    unguarded_main,
)
from feedline.pipeline.plan import (
    TAKE_ROWS,
    BatchPlan,
    Filled,
    fill,
    fill_per_sample,
    fill_rows,
    make_plan,
    probe_batch,
    with_lists,
)
from feedline.pipeline.scheduler import Scheduler
from feedline.pipeline.slots import Fence, Slot, SlotPool
from feedline.pipeline.split import Part, Split, cancel_hook, part_rows
from feedline.pipeline.transfer import Engine
from feedline.pipeline.workers_process import ProcessWorkers, Result
from feedline.pipeline.workers_thread import ThreadWorkers
from feedline.placement import Placement


@dataclass
class Ready:
    """A batch whose transfer has been started, waiting for the consumer."""

    batch_id: int
    tree: Any
    fence: Fence | None
    keys: list[str]
    skipped: list[dict[str, str]] = field(default_factory=list)
    worker: str = ""
    lists: tuple[tuple[str, collate.Leaf, str | None], ...] = ()
    """Dense fields this batch delivers as lists (a sample of another shape, or without the
    field: the key of the first such sample)."""


def _record(stage: str, t0: float, t1: float, attrs: dict[str, Any]) -> None:
    spans.emit(stage, t0, t1, **attrs)


def _lacking(filled: Filled, path: collate.Path) -> str | None:
    """The key of the first sample of ``filled`` without the field at ``path``, if any."""
    values = filled.ragged.get(path, ())
    return next((str(k) for k, v in zip(filled.keys, values, strict=False) if v is None), None)


def _ragged(values: list[Any]) -> list[Any] | torch.Tensor:
    """A ragged leaf as delivered: arrays as tensors, in a list; tensors of a dtype numpy
    lacks (``bfloat16`` members of a ``.pt``, which the numpy collate cannot stack) of one
    shape stacked, as ``default_collate`` gives them."""
    out = [torch.from_numpy(v) if isinstance(v, np.ndarray) and v.dtype.kind in "biufc" else v
           for v in values]
    first = out[0] if out else None
    if (isinstance(first, torch.Tensor) and first.dtype in _NOT_NUMPY
            and all(isinstance(v, torch.Tensor) and v.dtype == first.dtype and v.shape == first.shape
                    for v in out)):
        return torch.stack(out)
    return out


_NOT_NUMPY = frozenset(getattr(torch, name) for name in (
    "bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz") if hasattr(torch, name))


@dataclass
class Options:
    """The runtime part of the loader's configuration."""

    batch_size: int
    workers: int
    worker_type: str
    window: int
    """Batches in flight at most (being prepared, or finished and waiting for the consumer):
    ``workers + prefetch``, lowered by :meth:`Runtime.configure` to what the budget holds."""
    shm_dir: str
    start_method: str
    collate_fn: Callable[[list[Any]], Any] | None
    timeout: float | None = None
    """The loader's per-batch timeout; also bounds how long close() waits for thread workers."""
    placement: Placement | None = None
    """Where workers run (:mod:`feedline.placement`); ``None`` or inactive: left alone."""
    after_delivery: DeviceDecode | None = None
    """A stage applied to each batch as it is delivered (decode on the device)."""


def fitted_window(window: int, budget: int, batch_bytes: int) -> int:
    """``window`` lowered so that its batches fit ``budget`` (at least one batch).

    Every batch in flight holds a batch of memory until the consumer takes it: a slot
    lent to the batch on CPU, an arena slot with process workers, the copied batch on the
    device. The slot pool bounds only the slots being filled, so without this a large
    ``prefetch`` decoded that many batches ahead whatever ``pinned_budget`` said
    (``prefetch=1000`` with 4 MiB batches and a 64 MiB budget: 843 MiB resident on CPU, a
    4 GiB arena in /dev/shm with process workers).
    """
    if batch_bytes <= 0:
        return window  # nothing dense: no slot memory to bound
    return max(1, min(window, budget // batch_bytes))


class Runtime:
    """Resources of one loader; started at the first batch, closed once."""

    def __init__(self, ctx: Context, engine: Engine, pool: SlotPool, opts: Options,
                 owner: int | None = None) -> None:
        self.ctx, self.engine, self.pool, self.opts = ctx, engine, pool, opts
        self.sched = Scheduler()
        self.gauges = Gauges()
        self.plan: BatchPlan | None = None
        """Decided once: at start with a custom collate, else from the probe batch."""
        self.pool_workers: ThreadWorkers | ProcessWorkers | None = None
        self.auto: AutoChoice | None = None
        """With ``worker_type="auto"``: the measurement and the decision."""
        self._retired: ThreadWorkers | None = None  # threads left after moving to processes
        self._mover: threading.Thread | None = None
        self._unguarded: str | None = None  # auto: why the script forbids processes
        self.closed = False
        self.pid = os.getpid()
        """The process that made the runtime: its workers, slots and arena are that
        process's; a forked child neither uses nor stops them."""
        self.owner = owner
        """The loader's ``id()``: the threads working for it file their spans under it
        (:func:`feedline.spans.bind`), so each loader's stages are measured apart."""
        self.fallbacks: Counter[str] = Counter()
        self.varied_noted = False
        """Dense field -> batches in which it was delivered as a list (another shape)."""
        self._lock = threading.Lock()

    @property
    def ready(self) -> bool:
        """Whether the plan is known (jobs other than the probe may run)."""
        return self.plan is not None

    def start(self, epoch_batches: int = 0) -> None:
        """Start the workers (the layout comes later, from the probe job); ``epoch_batches``
        bounds how long ``auto`` measures.

        Raises:
            ConfigError: this process is a spawn/forkserver worker importing the script
                (with ``auto`` or processes it would run the user's loop again, unseen).
            WorkerDied: process workers did not start.
        """
        refuse_while_bootstrapping("iterates a feedline Loader")
        custom = self.opts.collate_fn is not None
        if custom:
            self.plan = make_plan(self.ctx, None, custom=True)
        if self.opts.worker_type == "auto":
            self._unguarded = unguarded_main()  # read on the thread running the loop
            self.auto = AutoChoice(self.opts.workers, usable_cores(), epoch_batches=epoch_batches)
            if self.opts.workers > 1:
                self.auto.start_probe()
        if self.opts.worker_type in ("thread", "auto"):
            place = self.opts.placement
            self.pool_workers = ThreadWorkers(self.opts.workers, self._timed_job, self.opts.timeout,
                                              on_start=place.apply if place else None)
        else:
            self.pool_workers = self._processes()

    @property
    def kind(self) -> str:
        """The kind of workers batches are submitted to now."""
        return self.pool_workers.kind if self.pool_workers is not None else self.opts.worker_type

    def _processes(self, configured: tuple[shm.ArenaSpec, BatchPlan] | None = None
                   ) -> ProcessWorkers:
        return ProcessWorkers(
            self.opts.workers, self.ctx, self.on_result, self.configure, self.opts.batch_size,
            start_method=self.opts.start_method, custom_collate=self.opts.collate_fn,
            timed=spans.active(), configured=configured, placement=self.opts.placement,
        )

    def _timed_job(self, job: Job | Part, worker: str) -> Ready | None:
        """Thread workers: :meth:`run_job`, timed for ``worker_type="auto"``."""
        spans.bind(self.owner)
        if self.auto is None or self.auto.decided is not None:
            return self.run_job(job, worker)
        t0, (c0, q0) = time.perf_counter(), thread_clock()
        ready = self.run_job(job, worker)
        c1, q1 = thread_clock()
        decision = self.auto.timed(job.probe, c1 - c0, time.perf_counter() - t0 - (q1 - q0), q1 - q0)
        if decision == "process":  # started aside: this batch is not held up
            mover = threading.Thread(target=self._move_to_processes, name="feedline-auto",
                                     daemon=True)
            mover.start()  # before it is seen: close() may join it at once (one it missed
            self._mover = mover  # sees closed and stops the processes it started itself)
        return ready

    def settle(self, timeout: float | None = None) -> bool:
        """Wait until a move to process workers decided by ``auto`` is done (or given up)."""
        mover = self._mover
        if mover is not None:
            mover.join(timeout)
            return not mover.is_alive()
        return True

    def _move_to_processes(self) -> None:
        """``auto`` decided on processes: start them with the plan; later jobs go there."""
        plan, auto = self.plan, self.auto
        assert plan is not None and auto is not None
        issue = self._unguarded or main_references(self.ctx, self.opts.collate_fn)
        if issue:
            auto.decided = "thread"
            auto.why += f"; but processes were not started: {issue}"
            return
        try:
            spec = None
            if plan.layout is not None:
                spec = shm.create(self.opts.shm_dir, plan.layout, self.opts.window)
            procs = self._processes(None if spec is None else (spec, plan))
        except Exception as exc:  # unpicklable dataset or transform, no /dev/shm...
            auto.decided = "thread"  # (the workers released the arena they were given)
            auto.why += f"; but process workers could not start ({type(exc).__name__}: {exc})"
            return
        with self._lock:
            if self.closed:
                procs.close()
                return
            threads = self.pool_workers
            assert isinstance(threads, ThreadWorkers)
            self._retired, self.pool_workers = threads, procs

    def configure(self, layout: collate.Layout, cpu_per_sample: float = 0.0) -> BatchPlan:
        """Fix the layout and the plan (once, from the probe batch); ``cpu_per_sample``:
        the probe's CPU seconds per sample on a thread worker, from which thread workers
        split each direct batch into parts (:func:`~feedline.pipeline.split.part_rows`).

        Raises:
            ResourceError: a batch exceeds the pinned budget, or /dev/shm is too small.
        """
        with self._lock:
            if self.plan is not None:
                return self.plan
            self.pool.configure(layout)
            self.opts.window = fitted_window(self.opts.window, self.pool.budget, layout.nbytes)
            plan = make_plan(self.ctx, layout)
            if not plan.per_sample and isinstance(self.pool_workers, ThreadWorkers) \
                    and not plan.fields(TAKE_ROWS):  # one index_select a tensor: not worth parts
                rows = part_rows(cpu_per_sample, layout.batch_size, self.opts.workers)
                plan = dataclasses.replace(plan, part_rows=rows)
            if not plan.per_sample:  # rows read or decoded directly from now on: the probe's
                # buffers go (a decode-rows batch reads into buffers of its own size)
                self.ctx.source.release_buffers()
            if isinstance(self.pool_workers, ProcessWorkers):
                spec = shm.create(self.opts.shm_dir, layout, self.opts.window)
                self.pool_workers.configure(spec, plan)
            self.plan = plan
            return plan

    def submit(self, job: Job) -> Any:
        """Queue ``job``; the future of its batch. Thread workers fill a batch of a plan
        with ``part_rows`` in parts (:mod:`feedline.pipeline.split`), queued in row order."""
        workers, plan = self.pool_workers, self.plan
        assert workers is not None
        if (isinstance(workers, ThreadWorkers) and plan is not None and plan.part_rows
                and not job.probe and len(job.indices) > plan.part_rows):
            split = Split(job, plan.part_rows, self.pool.acquire, self._fill_part,
                          self._finish_split, self.pool.release)
            ended = cancel_hook(split)
            for part in split.parts():
                workers.submit(part).add_done_callback(ended)
            return split.future
        return workers.submit(job)

    # -- thread workers ---------------------------------------------------------------------
    def stuck(self) -> FeedlineError | None:
        """Why a late batch will never come (a forked worker blocked for good on a lock it
        inherited held: :mod:`feedline.pipeline.inherited_locks`), or ``None``."""
        workers = self.pool_workers
        return workers.stuck() if isinstance(workers, ProcessWorkers) else None

    def run_job(self, job: Job | Part, worker: str) -> Ready | None:
        """Thread workers: the whole batch (fill a slot following the plan, start the copy),
        or one part of it (the part that ends last sends the batch)."""
        if isinstance(job, Part):
            job.split.run_part(job, worker)
            return None
        if not self.sched.wanted(job.run):
            return None  # a newer pass started; this batch is not wanted
        record = _record if spans.active() else None
        if job.probe:
            taken: list[Slot] = []
            c0 = time.thread_time()

            def slot_for(layout: collate.Layout) -> Mapping[collate.Path, np.ndarray]:
                cpu = (time.thread_time() - c0) / max(1, len(job.indices))
                self.configure(layout, cpu)
                taken.append(self.pool.acquire())
                return taken[0].arrays

            try:
                _, filled = probe_batch(self.ctx, job, worker, record, self.opts.batch_size,
                                        slot_for)
            except BaseException:
                if taken:
                    self.pool.release(taken[0])
                raise
            return self._send(job, taken[0], filled, worker)
        plan = self.plan
        assert plan is not None
        if plan.custom:
            assert self.opts.collate_fn is not None
            prep = prepare(self.ctx, plan.stages, job, worker, record)
            return self._finish_custom(job, run_collate(self.opts.collate_fn, prep, worker), prep.keys,
                                       prep.skipped, worker)
        slot = self.pool.acquire()
        try:
            filled = fill(self.ctx, plan, job, worker, record, slot.arrays)
        except BaseException:
            self.pool.release(slot)
            raise
        return self._send(job, slot, filled, worker)

    def _fill_part(self, part: Part, slot: Slot, worker: str) -> Filled | None:
        """Thread workers: the rows of one part of a split batch (None: they failed)."""
        plan, job = self.plan, part.split.job
        assert plan is not None
        if not self.sched.wanted(job.run):
            return Filled([])  # a newer pass started: the batch is dropped when it ends
        record = _record if spans.active() else None
        return fill_rows(self.ctx, plan, job, part.lo, part.hi, worker, record, slot.arrays)

    def _finish_split(self, job: Job, slot: Slot, parts: Filled, failed: bool, worker: str
                      ) -> Ready | None:
        """Thread workers: every part of split batch ``job`` is done; send it (redone per
        sample first when a part failed, as an unsplit batch is)."""
        if not self.sched.wanted(job.run):
            self.pool.release(slot)
            return None
        try:
            if failed:
                plan = self.plan
                assert plan is not None
                record = _record if spans.active() else None
                filled = fill_per_sample(self.ctx, plan, job, worker, record, slot.arrays)
            else:
                assert self.plan is not None
                filled = with_lists(self.plan, parts, slot.arrays)
        except BaseException:
            self.pool.release(slot)
            raise
        return self._send(job, slot, filled, worker)

    # -- process workers --------------------------------------------------------------------
    def on_result(self, res: Result, views: Mapping[collate.Path, np.ndarray]) -> Ready | None:
        """Process workers: runs in the parent's reader thread for each finished job;
        ``views`` are the dense rows of its arena slot."""
        spans.bind(self.owner)
        for stage, t0, t1, attrs in res.timings:
            spans.emit(stage, t0, t1, **attrs)
        if not self.sched.wanted(res.job.run):
            return None
        if self.plan is not None and self.plan.custom:
            return self._finish_custom(res.job, res.custom, res.keys, res.skipped, res.worker)
        n = len(res.keys)
        filled = Filled(res.keys, res.ragged, res.skipped)
        workers = self.pool_workers
        lent = (workers.lend(res.slot, views)
                if not self.engine.reuse_slots and isinstance(workers, ProcessWorkers) else None)
        if lent is not None:  # on CPU the batch is the arena slot itself, lent until its tensors are gone
            return self._deliver(res.job, lent, filled, res.worker)
        slot = self.pool.acquire()  # out of the arena (reused) into a slot (pinned on CUDA)
        try:
            with spans.span("pin", batch=res.job.batch_id, worker=res.worker):
                for p, v in views.items():
                    slot.arrays[p][:n] = v[:n]
        except BaseException:
            self.pool.release(slot)
            raise
        return self._send(res.job, slot, filled, res.worker)

    # -- both -------------------------------------------------------------------------------
    def _send(self, job: Job, slot: Slot, filled: Filled, worker: str) -> Ready:
        """Start the transfer of the filled ``slot``, give the slot back."""
        fence: Fence | None = None
        try:
            ready = self._deliver(job, slot.tensors, filled, worker)
            fence = ready.fence
        finally:
            self.pool.release(slot, fence)
        return ready

    def _deliver(self, job: Job, tensors: Mapping[collate.Path, Any], filled: Filled, worker: str
                 ) -> Ready:
        """The batch over the dense ``tensors`` (a slot's) and ``filled``'s lists, its
        transfer started."""
        plan = self.plan
        assert plan is not None and plan.layout is not None
        layout = plan.layout
        n = len(filled.keys)
        values: dict[Any, Any] = {p: t[:n] for p, t in tensors.items()}
        values.update({p: _ragged(v) for p, v in filled.ragged.items()})
        tree = collate.unflatten(layout.skeleton, values)
        if isinstance(tree, dict):
            tree["__key__"] = list(filled.keys)
        tree, fence = self._send_tree(job, tree, worker)
        lists = tuple(("/".join(map(str, leaf.path)), leaf, _lacking(filled, leaf.path))
                      for leaf in layout.dense if leaf.path in filled.ragged)
        return Ready(job.batch_id, tree, fence, filled.keys, filled.skipped, worker, lists)

    def note_lists(self, lists: tuple[tuple[str, collate.Leaf, str | None], ...]) -> None:
        """A delivered batch gives dense fields as lists: count them; warn the first time
        for each field (in the consumer's thread, so the warning points at its loop)."""
        for name, leaf, lacking in lists:
            self.fallbacks[name] += 1
            if self.fallbacks[name] == 1 and lacking is not None:
                warnings.warn(  # a missing field (a camera that did not record): no resize helps
                    f"field {name!r}: sample {lacking!r} lacks it (batch 0's samples hold it as "
                    f"{leaf.shape} {np.dtype(leaf.dtype).name}); this batch (and any other like it) "
                    "gives the field as a list of tensors, None where a sample lacks it. For dense "
                    "batches fill it in transform= (zeros of its shape and a flag saying it is "
                    "missing), leave such samples out (ds.subset(indices)), or for recorded episodes "
                    "read windows with feedline.episodes.Windows, which fills and flags them",
                    RuntimeWarning, stacklevel=5)  # warn, note_lists, _delivered, _next, __next__
            elif self.fallbacks[name] == 1:
                warnings.warn(
                    f"field {name!r}: a sample of another shape or dtype than batch 0's "
                    f"{leaf.shape} {np.dtype(leaf.dtype).name}, or without the field; this batch "
                    "(and any other like it) gives the field as a list of tensors (None where a "
                    "sample lacks it). For dense batches make it one size: for images "
                    "Loader(decode_size=(h, w)), or transform=feedline.vision.ImageTransform("
                    f"{name!r}, size=...) (crop, flip, normalise), or another resize or crop in "
                    "transform=; for other fields decode={field: fn} to a fixed size",
                    RuntimeWarning, stacklevel=5)  # warn, note_lists, _delivered, _next, __next__

    def note_varied(self) -> None:
        """Once, at the first delivered batch: warn about the fields that batch 0 held as
        arrays of several shapes, delivered as lists in every batch (before: silently, and a
        model given a list fails far from the cause; a DataLoader refuses to stack them)."""
        self.varied_noted = True
        layout = self.plan.layout if self.plan is not None else None
        for path, shapes in layout.varied if layout is not None else ():
            name = "/".join(map(str, path))
            warnings.warn(
                f"field {name!r}: batch 0's samples hold it at several shapes ("
                f"{', '.join(map(str, shapes))}{', ...' if len(shapes) == 3 else ''}), so every batch "
                "gives it as a list of tensors, not one tensor. For one tensor per batch make it one "
                "size in transform= (audio: feedline.audio.ClipTransform pads or crops clips; images: "
                "feedline.vision.ImageTransform, or Loader(decode_size=(h, w)); token lists for a language "
                "model: fixed blocks from feedline.text.write_token_blocks; 3D scans and other N-D arrays: "
                "random patches, one box for scan and mask, from feedline.patches.PatchTransform), "
                "or pad each batch to its longest "
                "in collate= as a DataLoader's collate_fn does: "
                f"collate=feedline.padding.PadCollate({{{name!r}: None}}) adds '{name.rsplit('.', 1)[0]}_lengths' "
                "(axis=-1 for [channels, frames] audio)",
                RuntimeWarning, stacklevel=5)  # warn, note_varied, _delivered, _next, __next__

    def _send_tree(self, job: Job, tree: Any, worker: str) -> tuple[Any, Fence | None]:
        """Start the transfer; when timed, the ``h2d`` span carries the copy stream's
        CUDA events (``events``), from which observe takes the device time."""
        if not spans.active():
            return self.engine.send(tree)
        t0 = time.perf_counter()
        sent, fence, events = self.engine.send_timed(tree)
        attrs = job.span_attrs(worker)
        if events is not None:
            attrs["events"] = events
        spans.emit("h2d", t0, time.perf_counter(), **attrs)
        return sent, fence

    def _finish_custom(self, job: Job, tree: Any, keys: list[str],
                       skipped: list[dict[str, str]], worker: str) -> Ready:
        # the batch is what the user's collate returned, as with a DataLoader: adding
        # "__key__" would break model(**batch) (packed samples carry theirs to the collate)
        if self.engine.needs_pinned:
            with spans.span("pin", batch=job.batch_id, worker=worker):
                tree = nested.pin(tree)
        sent, fence = self._send_tree(job, tree, worker)
        return Ready(job.batch_id, sent, fence, keys, skipped, worker)

    def check_process(self) -> None:
        """Refuse use from a forked child of the process that made the loader.

        Raises:
            ConfigError: this is not that process (its worker threads do not exist here,
                and its worker processes belong to the parent: a batch would never come).
        """
        if os.getpid() != self.pid:
            raise ConfigError(
                f"this loader was made by process {self.pid}; process {os.getpid()} is a fork "
                "of it, where its workers do not run", field="loader",
                fix="create a new Loader in the child process (or fork before making the loader)")

    def close(self) -> None:
        """Stop the workers and drop the slots (idempotent; safe from a finalizer).

        In a forked child this only marks the copy closed: the workers, slots and
        shared memory belong to the parent, which keeps using them.
        """
        if self.closed:
            return
        self.closed = True
        if os.getpid() != self.pid:
            return
        if self.auto is not None:
            self.auto.stop_probe()
        if self.opts.after_delivery is not None:
            self.opts.after_delivery.close()  # its thread, after the decode it is running
        self.sched.close()
        self.pool.close()  # first: wakes producers waiting for a slot
        try:
            self.settle(60.0)  # a move to processes in progress sees closed and stops them
        finally:  # a Ctrl-C while settling still stops the workers (they would outlive a notebook cell)
            with self._lock:
                pools = [self.pool_workers, self._retired]
            for pool in pools:
                if pool is not None:
                    pool.close()
