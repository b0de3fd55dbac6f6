"""One batch of work: read, decode, transform and check the samples of a batch.

Used by thread and process workers alike (this module does not import torch).
A failing sample either raises :class:`feedline.errors.WorkerError` (with the
original type, traceback text, worker, shard, key and stage, chained as
``__cause__``) or, with ``on_error="skip"``, is counted and replaced by the
next samples that follow the batch in the rank's order (see
:meth:`feedline.pipeline.sampler.Plan.refill`), so batch sizes and the number
of batches stay the same on every rank.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from feedline.decode import Decoders
from feedline.errors import FeedlineError, WorkerError
from feedline.pipeline import collate
from feedline.pipeline.source import Item, Source

Record = Callable[[str, float, float, dict[str, Any]], None]


@dataclass
class Job:
    """Batch ``batch_id`` of pass ``run``: its indices and its refill candidates."""

    run: int
    batch_id: int
    indices: list[int]
    refill: list[int]


@dataclass
class Context:
    """Everything a worker needs to prepare batches (picklable)."""

    source: Source
    decoders: Decoders
    transform: Callable[[Any], Any] | None
    on_error: str
    layout: collate.Layout | None = None
    columnar: bool = False
    """Whether batches can be read straight into slots (:func:`columnar`); set with the
    layout, so process workers receive it."""


@dataclass
class Prepared:
    samples: list[Any]
    keys: list[str]
    skipped: list[dict[str, str]] = field(default_factory=list)
    checked: bool = True
    """False when prepared before the layout was known (samples not checked against it)."""
    filled: bool = False
    """True when the batch was read straight into the slot's rows ``0..len(keys)-1``
    (:func:`read_into_slot`): there are no samples to collate and no ragged leaves."""


def worker_error(exc: BaseException, item: Item, stage: str, worker: str,
                 shard: str | None = None) -> WorkerError:
    """Wrap ``exc`` with its place; keeps type name and traceback text."""
    err = WorkerError(
        f"{type(exc).__name__} in {stage}: {exc}",
        worker=worker, shard=shard or item.shard, key=item.key, stage=stage,
        fix='fix the sample or the function, or pass on_error="skip" to skip bad samples',
    )
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    err.__dict__.update(exc_type=type(exc).__name__, traceback_text=text)
    err.__cause__ = exc
    return err


Live = list[tuple[Item, Any]]
Failed = list[tuple[Item, str, BaseException]]


def _stage(name: str, fn: Callable[[Any, Item], Any], live: Live, failed: Failed,
           record: Record | None, attrs: dict[str, Any]) -> Live:
    """Apply one stage to every live sample; failures move to ``failed``; timed as a span.

    The span carries the thread's CPU seconds (``cpu``), so a report can tell time
    blocked (I/O, sleep, a lock) from CPU work inside the stage.
    """
    t0, c0 = time.perf_counter(), time.thread_time()
    ok: Live = []
    for item, sample in live:
        try:
            ok.append((item, fn(sample, item)))
        except Exception as exc:
            failed.append((item, name, exc))
    if record is not None:
        record(name, t0, time.perf_counter(), attrs | {"cpu": time.thread_time() - c0})
    return ok


def _checked(layout: collate.Layout, sample: Any) -> Any:
    collate.check(layout, sample)
    return sample


Into = Mapping[str, np.ndarray]
"""Field -> the batch slot's array for it: fields decoded straight into their slot row."""


def _decode_stage(ctx: Context, items: list[Item], live: Live, failed: Failed,
                  record: Record | None, attrs: dict[str, Any], into: Into | None, base: int
                  ) -> Live:
    """Decode packed samples; with ``into``, item ``k`` decodes into row ``base + k``."""
    decoders = ctx.decoders
    if not into:
        return _stage("decode", lambda s, it: decoders.decode_sample(s, key=it.key), live,
                      failed, record, attrs)
    rows = {id(it): base + k for k, it in enumerate(items)}

    def decode(sample: Any, it: Item) -> Any:
        row = rows[id(it)]
        return decoders.decode_sample(sample, key=it.key,
                                      into={f: a[row] for f, a in into.items()})

    return _stage("decode", decode, live, failed, record, attrs)


def _run_stages(ctx: Context, items: list[Item], record: Record | None, attrs: dict[str, Any],
                into: Into | None = None, base: int = 0) -> tuple[Live, Failed]:
    """Decode, transform and check fetched items, stage by stage (each stage one span)."""
    failed: Failed = [(it, "read", it.error) for it in items if it.error is not None]
    live: Live = [(it, it.value) for it in items if it.error is None]
    if ctx.source.packed:
        live = _decode_stage(ctx, items, live, failed, record, attrs, into, base)
    if ctx.transform is not None:
        transform = ctx.transform
        live = _stage("transform", lambda s, it: transform(s), live, failed, record, attrs)
    if ctx.layout is not None:
        layout = ctx.layout
        live = _stage("collate", lambda s, it: _checked(layout, s), live, failed, None, attrs)
    return live, failed


def _detach(sample: Any) -> Any:
    """Copy array views of a packed sample so they outlive the read buffer."""
    if isinstance(sample, dict):
        return {k: _detach(v) for k, v in sample.items()}
    if isinstance(sample, np.ndarray) and not sample.flags.owndata:
        return sample.copy()
    return sample


def prepare(ctx: Context, job: Job, worker: str, record: Record | None,
            into: Into | None = None) -> Prepared:
    """Read, decode, transform and check the samples of ``job``.

    ``into`` (packed sources only; see :func:`direct_fields`): the batch slot's arrays of
    fields to decode straight into it. Sample ``i`` of the result then usually holds a
    view of row ``i`` (``collate.fill`` skips rows already in place); an image that does
    not fit its row, or a batch that needed refilling, ends up as separate arrays that
    ``fill`` copies in as usual.

    Raises:
        WorkerError: a sample failed and ``on_error="raise"``, or too many failed
            to refill the batch.
    """
    want = len(job.indices)
    out = Prepared([], [], checked=ctx.layout is not None)
    pending, refill = list(job.indices), list(job.refill)
    attrs = {"batch": job.batch_id, "worker": worker}
    while pending:
        t0 = time.perf_counter()
        items = ctx.source.fetch(pending)
        if record is not None:
            record("read", t0, time.perf_counter(), attrs)
        live, failed = _run_stages(ctx, items, record, attrs, into, len(out.samples))
        if failed and ctx.on_error == "raise":
            order = {id(it): k for k, it in enumerate(items)}
            item, stage, exc = min(failed, key=lambda f: order[id(f[0])])
            raise worker_error(exc, item, stage, worker, ctx.source.shard_of(item))
        for item, stage, exc in failed:
            out.skipped.append({"key": item.key, "stage": stage, "error": type(exc).__name__})
        for item, sample in live:
            out.samples.append(sample)
            out.keys.append(item.key)
        missing = want - len(out.samples)
        if missing and not refill:
            raise WorkerError(
                f"{len(out.skipped)} bad samples; not enough good ones left to refill batch "
                f"{job.batch_id}", worker=worker, stage="read",
                fix="repair the dataset (feedline verify) or lower batch_size",
            )
        if missing and ctx.source.packed:
            out.samples = [_detach(s) for s in out.samples]
        pending, refill = refill[:missing], refill[missing:]
    return out


def direct_fields(ctx: Context, arrays: Mapping[collate.Path, np.ndarray]) -> dict[str, np.ndarray]:
    """The slot arrays that packed fields can be decoded into (``prepare(into=)``).

    Only without a transform (it may replace or reshape what was decoded), for top-level
    dense fields whose codec can decode in place (:meth:`Decoders.decodes_into`).
    """
    layout = ctx.layout
    if not ctx.source.packed or ctx.transform is not None or layout is None:
        return {}
    return {str(leaf.path[0]): arrays[leaf.path] for leaf in layout.dense
            if len(leaf.path) == 1 and isinstance(leaf.path[0], str)
            and ctx.decoders.decodes_into(leaf.path[0])}


def columnar(ctx: Context) -> bool:
    """Whether batches of ``ctx`` can be read straight into slots (:func:`read_into_slot`):
    a packed host source, no transform, and a layout of only 1-D dense raw-dtype fields."""
    layout = ctx.layout
    if layout is None or not layout.leaves or not layout.flat or ctx.transform is not None:
        return False
    for leaf in layout.leaves:
        name = leaf.path[0]
        if leaf.shape is None or len(leaf.shape) != 1 or not isinstance(name, str):
            return False
        dtype = ctx.decoders.raw_dtype(name)
        if dtype is None or dtype != np.dtype(leaf.dtype):
            return False
    return ctx.source.columnar


def read_into_slot(ctx: Context, job: Job, worker: str, record: Record | None,
                   arrays: Mapping[collate.Path, np.ndarray]) -> Prepared | None:
    """Read the batch straight into the slot's ``arrays`` when every field is a raw tensor.

    Applies to a packed source without a transform whose layout holds only dense
    raw-dtype fields (``.f32``, ``.u8``...) decoded as stored: their bytes *are* the
    batch rows, so one read per sample and field fills the slot (see
    ``PackedDataset.read_fields_into``) with no per-sample decode, check or copy.
    Returns ``None`` when the path does not apply, and also when the batch holds a
    sample that does not fit (a missing field, another size) or fails to read: the
    per-sample path (:func:`prepare`) then re-reads the batch and raises or skips
    exactly as it always does.
    """
    if not ctx.columnar or ctx.layout is None:
        return None
    n = len(job.indices)
    out = {str(leaf.path[0]): arrays[leaf.path][:n] for leaf in ctx.layout.leaves}
    t0 = time.perf_counter()
    try:
        keys = ctx.source.read_columns(job.indices, out)
    except FeedlineError:
        return None
    if record is not None:
        record("read", t0, time.perf_counter(), {"batch": job.batch_id, "worker": worker})
    return Prepared([], keys, filled=True)
