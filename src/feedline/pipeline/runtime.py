"""The running parts of a loader: slot pool, transfer engine, worker pool.

:class:`Runtime` owns every resource a loader holds (threads, processes,
shared memory, pinned slots) and turns a :class:`~feedline.pipeline.jobs.Job`
into a :class:`Ready` batch: prepare the samples, fill a slot, start the
transfer. It holds no reference to the :class:`~feedline.pipeline.loader.Loader`,
so ``weakref.finalize(loader, runtime.close)`` can clean up when the loader
is dropped.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from feedline import spans
from feedline.errors import DecodeError
from feedline.pipeline import collate, nested, shm
from feedline.pipeline.jobs import (
    Context,
    Job,
    Prepared,
    columnar,
    direct_fields,
    prepare,
    read_into_slot,
)
from feedline.pipeline.slots import Fence, Slot, SlotPool
from feedline.pipeline.transfer import Engine
from feedline.pipeline.workers_process import ProcessWorkers, Result
from feedline.pipeline.workers_thread import ThreadWorkers


@dataclass
class Ready:
    """A batch whose transfer has been started, waiting for the consumer."""

    batch_id: int
    tree: Any
    fence: Fence | None
    keys: list[str]
    skipped: list[dict[str, str]] = field(default_factory=list)
    worker: str = ""


def _record(stage: str, t0: float, t1: float, attrs: dict[str, Any]) -> None:
    spans.emit(stage, t0, t1, **attrs)


def _ragged(values: list[Any]) -> list[Any]:
    return [torch.from_numpy(v) if isinstance(v, np.ndarray) and v.dtype.kind in "biufc" else v
            for v in values]


def _fits(layout: collate.Layout, samples: list[Any]) -> bool:
    try:
        for sample in samples:
            collate.check(layout, sample)
    except DecodeError:
        return False
    return True


@dataclass
class Options:
    """The runtime part of the loader's configuration."""

    batch_size: int
    workers: int
    worker_type: str
    window: int
    shm_dir: str
    start_method: str
    collate_fn: Callable[[list[Any]], Any] | None
    timeout: float | None = None
    """The loader's per-batch timeout; also bounds how long close() waits for thread workers."""


class Runtime:
    """Resources of one loader; started at the first batch, closed once."""

    def __init__(self, ctx: Context, engine: Engine, pool: SlotPool, opts: Options) -> None:
        self.ctx, self.engine, self.pool, self.opts = ctx, engine, pool, opts
        self.current_run = 0
        self.ahead_run: int | None = None
        """The run of batches prepared ahead for the next epoch (see ``Loader``), if any."""
        self._runs = itertools.count(1)
        self.pool_workers: ThreadWorkers | ProcessWorkers | None = None
        self.closed = False
        self._layout_lock = threading.Lock()

    def start(self, probe: Job) -> None:
        """Start the workers.

        Thread workers infer the batch layout from the first batch they finish.
        Process workers need it before they start (to size the shared-memory
        arena), so ``probe`` (the first batch) is prepared here once.

        Raises:
            ResourceError: a batch exceeds the pinned budget, or /dev/shm is too small.
            WorkerError: a sample of the probe batch failed with ``on_error="raise"``.
        """
        if self.opts.worker_type == "thread":
            self.pool_workers = ThreadWorkers(self.opts.workers, self.run_job, self.opts.timeout)
            return
        if self.opts.collate_fn is None:
            self._layout_for(prepare(self.ctx, probe, "probe", None).samples)
        layout = self.ctx.layout or collate.Layout(collate.Ref(()), (), 1, 1)
        spec = shm.create(self.opts.shm_dir, layout, self.opts.window)
        self.pool_workers = ProcessWorkers(
            self.opts.workers, self.ctx, spec, self.on_result,
            start_method=self.opts.start_method, custom_collate=self.opts.collate_fn,
            timed=spans.active(),
        )

    def new_run(self) -> int:
        """A run id no job has had yet (a pass, or batches prepared ahead)."""
        return next(self._runs)

    def wanted(self, run: int) -> bool:
        """Whether a job of ``run`` is still wanted: the current pass or the batches ahead."""
        return run == self.current_run or run == self.ahead_run

    def _layout_for(self, samples: list[Any]) -> collate.Layout:
        """The batch layout, inferred once from the first prepared batch."""
        with self._layout_lock:
            if self.ctx.layout is None:
                depth = 1 if self.ctx.source.packed else 8
                layout = collate.infer_layout(samples, self.opts.batch_size, depth)
                self.pool.configure(layout)
                self.ctx.layout = layout
                self.ctx.columnar = columnar(self.ctx)
            return self.ctx.layout

    def submit(self, job: Job) -> Future[Any]:
        assert self.pool_workers is not None
        return self.pool_workers.submit(job)

    def run_job(self, job: Job, worker: str) -> Ready | None:
        """Thread workers: the whole batch (prepare, fill, start the transfer).

        Once the layout is known, the slot is taken first and JPEG fields are decoded
        straight into it (no per-sample image arrays, no stacking copy).
        """
        if not self.wanted(job.run):
            return None  # a newer pass started; this batch is not wanted
        record = _record if spans.active() else None
        layout = self.ctx.layout
        if self.opts.collate_fn is None and layout is not None:
            slot = self.pool.acquire()
            try:
                prep = read_into_slot(self.ctx, job, worker, record, slot.arrays) or prepare(
                    self.ctx, job, worker, record, direct_fields(self.ctx, slot.arrays))
            except BaseException:
                self.pool.release(slot)
                raise
            return self._fill_and_send(job, layout, slot, prep, worker)
        prep = prepare(self.ctx, job, worker, record)
        if self.opts.collate_fn is not None:
            return self._finish_custom(job, self.opts.collate_fn(prep.samples), prep.keys,
                                       prep.skipped, worker)
        layout = self._layout_for(prep.samples)
        if not prep.checked and not _fits(layout, prep.samples):
            prep = prepare(self.ctx, job, worker, None)  # rare: redo with the layout known
        return self._fill_and_send(job, layout, self.pool.acquire(), prep, worker)

    def _fill_and_send(self, job: Job, layout: collate.Layout, slot: Slot, prep: Prepared,
                       worker: str) -> Ready:
        """Collate ``prep`` into ``slot``, start the transfer, give the slot back."""
        fence: Fence | None = None
        try:
            ragged: dict[collate.Path, list[Any]] = {}
            if not prep.filled:
                with spans.span("collate", batch=job.batch_id, worker=worker):
                    ragged = collate.fill(layout, slot.arrays, prep.samples)
            n = len(prep.keys)
            dense = {p: t[:n] for p, t in slot.tensors.items()}
            tree, fence = self._send(job, layout, dense, ragged, prep.keys, worker)
        finally:
            self.pool.release(slot, fence)
        return Ready(job.batch_id, tree, fence, prep.keys, prep.skipped, worker)

    def on_result(self, res: Result, arena: shm.Arena) -> Ready | None:
        """Process workers: runs in the parent's reader thread for each finished job."""
        for stage, t0, t1, attrs in res.timings:
            spans.emit(stage, t0, t1, **attrs)
        if not self.wanted(res.job.run):
            return None
        if self.opts.collate_fn is not None:
            return self._finish_custom(res.job, res.custom, res.keys, res.skipped, res.worker)
        layout = self.ctx.layout
        assert layout is not None
        views, n = arena.slot(res.slot), len(res.keys)
        slot = self.pool.acquire()  # out of the arena (reused) into a slot (pinned on CUDA)
        fence = None
        try:
            with spans.span("pin", batch=res.job.batch_id, worker=res.worker):
                for p, v in views.items():
                    slot.arrays[p][:n] = v[:n]
            dense = {p: t[:n] for p, t in slot.tensors.items()}
            tree, fence = self._send(res.job, layout, dense, res.ragged, res.keys, res.worker)
        finally:
            self.pool.release(slot, fence)
        return Ready(res.job.batch_id, tree, fence, res.keys, res.skipped, res.worker)

    def _send(self, job: Job, layout: collate.Layout, dense: dict[Any, torch.Tensor],
              ragged: dict[Any, list[Any]], keys: list[str], worker: str
              ) -> tuple[Any, Fence | None]:
        values: dict[Any, Any] = dict(dense)
        values.update({p: _ragged(v) for p, v in ragged.items()})
        tree = collate.unflatten(layout.skeleton, values)
        if isinstance(tree, dict):
            tree["__key__"] = list(keys)
        return self._send_tree(job, tree, worker)

    def _send_tree(self, job: Job, tree: Any, worker: str) -> tuple[Any, Fence | None]:
        """Start the transfer; when timed, the ``h2d`` span carries the copy stream's
        CUDA events (``events``), from which observe takes the device time."""
        if not spans.active():
            return self.engine.send(tree)
        t0 = time.perf_counter()
        sent, fence, events = self.engine.send_timed(tree)
        attrs: dict[str, Any] = {"batch": job.batch_id, "worker": worker}
        if events is not None:
            attrs["events"] = events
        spans.emit("h2d", t0, time.perf_counter(), **attrs)
        return sent, fence

    def _finish_custom(self, job: Job, tree: Any, keys: list[str],
                       skipped: list[dict[str, str]], worker: str) -> Ready:
        if isinstance(tree, dict) and "__key__" not in tree:
            tree["__key__"] = list(keys)
        if self.engine.needs_pinned:
            with spans.span("pin", batch=job.batch_id, worker=worker):
                tree = nested.pin(tree)
        sent, fence = self._send_tree(job, tree, worker)
        return Ready(job.batch_id, sent, fence, keys, skipped, worker)

    def close(self) -> None:
        """Stop the workers and drop the slots (idempotent; safe from a finalizer)."""
        if self.closed:
            return
        self.closed = True
        self.current_run = -1
        self.ahead_run = None
        self.pool.close()  # first: wakes producers waiting for a slot
        if self.pool_workers is not None:
            self.pool_workers.close()
