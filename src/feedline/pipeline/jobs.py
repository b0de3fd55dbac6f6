"""One batch of work on the per-sample path: read the samples, run the stages on each.

Used by thread and process workers alike (this module does not import torch);
which fields of a batch take this path is decided once by the batch plan
(:mod:`feedline.pipeline.plan`).
A failing sample either raises :class:`feedline.errors.WorkerError` (with the
original type, traceback text, worker, shard, key and stage, chained as
``__cause__``) or, with ``on_error="skip"``, is counted and replaced by the
next samples that follow the batch in the rank's order (see
:meth:`feedline.pipeline.sampler.Plan.refill`), so batch sizes and the number
of batches stay the same on every rank.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from feedline.decode import Decoders
from feedline.errors import FeedlineError, WorkerError
from feedline.pipeline._user_frames import from_user, user_frame
from feedline.pipeline.source import Item, Source
from feedline.pipeline.stages import Decode, Place, Stage, Transform

Record = Callable[[str, float, float, dict[str, Any]], None]


@dataclass
class Job:
    """Batch ``batch_id`` of pass ``run``: its indices and its refill candidates."""

    run: int
    batch_id: int
    indices: list[int]
    refill: list[int]
    probe: bool = False
    """Batch 0 of the plan, prepared before the layout is known: it decides the layout."""

    def span_attrs(self, worker: str) -> dict[str, Any]:
        """What each stage span of this batch carries: batch, pass and worker (observe tells
        batches of different passes apart by ``run``)."""
        return {"batch": self.batch_id, "run": self.run, "worker": worker}


@dataclass
class Context:
    """Everything a worker needs to prepare batches (picklable)."""

    source: Source
    decoders: Decoders
    transform: Callable[[Any], Any] | None
    on_error: str
    stages: tuple[Stage, ...] = ()
    """Extra per-sample stages, run after decode and transform (see :mod:`.stages`)."""

    def sample_stages(self) -> tuple[Stage, ...]:
        """Decode (packed sources), transform, then the extra stages: the per-sample work."""
        first: list[Stage] = [Decode(self.decoders)] if self.source.packed else []
        if self.transform is not None:
            first.append(Transform(self.transform))
        return (*first, *self.stages)

    def known_fields(self) -> tuple[str, ...]:
        """The fields every batch's layout holds beyond batch 0's: a packed dataset's
        fields when no transform or stage may rename them; else none."""
        if self.transform is not None or self.stages:
            return ()
        return tuple(self.source.fields)


@dataclass
class Prepared:
    """The samples of a batch after every stage, their keys and dataset indices, and the
    bad samples skipped (``on_error="skip"``)."""

    samples: list[Any]
    keys: list[str]
    indices: list[int] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)


USER_RAISES = (Exception, SystemExit, KeyboardInterrupt)
"""What a sample's code may raise and still be that sample's error (a ``WorkerError`` naming
its key and stage), in thread and process workers alike. ``SystemExit`` and
``KeyboardInterrupt`` come only from the code itself there: Python raises a signal's
exception (Ctrl-C, a SIGTERM handler's ``sys.exit``) in the main thread only, and process
workers ignore SIGINT (before: a ``sys.exit()`` in a transform ended the epoch with
``SystemExit`` from thread workers, and a process worker with "exited with code 0" and no
key; a ``KeyboardInterrupt`` printed the worker's traceback). See :func:`raised_by_code`."""

IN_WORKER_PROCESS = False
"""True in a process worker (set as it starts): its main thread runs the samples' code."""


def raised_by_code(exc: BaseException) -> bool:
    """Whether ``exc``, raised while a sample's code ran, is that code's own: any ``Exception``;
    ``SystemExit``/``KeyboardInterrupt`` unless they may be a signal's, in the training
    process's main thread, where they stay the loop's."""
    return (isinstance(exc, Exception) or IN_WORKER_PROCESS
            or threading.current_thread() is not threading.main_thread())


def exc_text(exc: BaseException) -> str:
    """``str(exc)``, or a stand-in when that raises: an exception whose ``__str__`` fails
    must still become an error naming its sample (before: the ``str()`` error escaped raw
    from the worker, in place of the ``WorkerError``)."""
    try:
        return str(exc)
    except Exception as e:  # any failure of the user's __str__
        return f"<str() of this {type(exc).__name__} raised {type(e).__name__}>"


def worker_error(exc: BaseException, item: Item, stage: str, worker: str,
                 shard: str | None = None, file: str | None = None) -> WorkerError:
    """Wrap ``exc`` with its place; keeps type name and traceback text.

    ``file``: the file a map-style dataset read the sample from, when it says
    (:meth:`Source.file_of`). The fix is ``exc``'s own when it has one (a shard deleted mid-epoch, a descriptor
    limit: the sample's code is not what to change), else to fix the sample or function;
    either way ``on_error="skip"`` is offered.
    """
    ours = exc if isinstance(exc, FeedlineError) else None
    field = ours.place.get("field") if ours else None
    fix = ours.fix if ours and ours.fix else "fix the sample or the function"
    if isinstance(exc, MemoryError):  # not the sample's fault: skipping it would not help
        return _chained(WorkerError(
            f"MemoryError in {stage}: {exc_text(exc)}", worker=worker, shard=shard or item.shard, key=item.key,
            stage=stage, file=file, at=user_frame(exc.__traceback__), fix=out_of_memory_fix()), exc)
    cause_shard = ours.place.get("shard") if ours else None  # the shard at fault, when it says
    err = WorkerError(
        f"{type(exc).__name__} in {stage}: {ours.placed() if ours else exc_text(exc)}",
        worker=worker, shard=cause_shard or shard or item.shard, key=item.key, stage=stage, field=field,
        file=file, at=user_frame(exc.__traceback__), fix=f'{fix}, or pass on_error="skip" to skip bad samples',
    )
    return _chained(err, exc)


def out_of_memory_fix() -> str:
    """What to change when a worker's allocation failed: the address-space limit when one is
    set (``ulimit -v``, a job scheduler's memory cap), and the arguments that set how much
    memory batches in flight take."""
    import resource

    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    where = ("the host (or a memory cgroup) is out of memory" if soft == resource.RLIM_INFINITY else
             f"this process may map {soft / 2**30:.2f} GiB (RLIMIT_AS, ulimit -v)")
    return (f"{where}: lower batch_size, prefetch or workers (each batch in flight takes memory), "
            "or raise the limit")


def collate_error(exc: Exception, keys: list[str], worker: str) -> WorkerError:
    """A ``collate=`` function's exception with its place: the batch's first keys, the line of
    the function (before: the bare exception, with no key, from thread workers)."""
    shown = ", ".join(map(str, keys[:3])) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")
    err = WorkerError(f"{type(exc).__name__} in collate: {exc_text(exc)} (batch of {shown})", worker=worker,
                      stage="collate", at=user_frame(exc.__traceback__),
                      fix="fix the collate function: it receives the list of the batch's samples, "
                          "each as the transform (or the decoder) gave it")
    return _chained(err, exc)


def run_collate(fn: Callable[[list[Any]], Any], prep: Prepared, worker: str) -> Any:
    """``fn(prep.samples)``, a ``collate=`` function; its exception as :func:`collate_error`."""
    try:
        return fn(prep.samples)
    except Exception as exc:
        raise collate_error(exc, prep.keys, worker) from exc


def _chained(err: WorkerError, exc: BaseException) -> WorkerError:
    """``err`` caused by ``exc``, with its full traceback text kept; the printed cause starts
    at the user's frame (:mod:`._user_frames`)."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    err.__dict__.update(exc_type=type(exc).__name__, traceback_text=text)
    from_user(exc)
    err.__cause__ = exc
    return err


Into = Mapping[str, np.ndarray]
"""Field -> the batch slot's array for it: fields decoded straight into their slot row."""


Live = list[tuple[Item, Any]]
Failed = list[tuple[Item, str, BaseException]]


def _run_stages(stages: tuple[Stage, ...], items: list[Item], record: Record | None,
                attrs: dict[str, Any], into: Into, base: int) -> tuple[Live, Failed]:
    """Apply ``stages`` in order to the fetched items (one span per stage); item ``k`` is
    row ``base + k`` of the slot. Failures move to the failed list, named by the stage.

    Each span carries the thread's CPU seconds (``cpu``), so a report can tell time
    blocked (I/O, sleep, a lock) from CPU work inside the stage.
    """
    failed: Failed = [(it, "read", it.error) for it in items if it.error is not None]
    places = [Place(it, base + k, into) for k, it in enumerate(items) if it.error is None]
    live = [(place, place.item.value) for place in places]
    for stage in stages:
        t0, c0 = time.perf_counter(), time.thread_time()
        accepts = getattr(stage, "accepts", None)  # a batch passing unchanged (stages.Accepting)
        if accepts is None or not accepts([sample for _, sample in live]):
            live = _each(stage, live, failed)
        if record is not None:
            record(stage.name, t0, time.perf_counter(), attrs | {"cpu": time.thread_time() - c0})
    return [(place.item, sample) for place, sample in live], failed


def _each(stage: Stage, live: list[tuple[Place, Any]], failed: Failed) -> list[tuple[Place, Any]]:
    """``stage`` applied to each sample; one that raises moves to ``failed``."""
    ok: list[tuple[Place, Any]] = []
    keep = ok.append
    for place, sample in live:
        try:
            keep((place, stage(sample, place)))
        except USER_RAISES as exc:
            if not raised_by_code(exc):
                raise
            failed.append((place.item, stage.name, exc))
    return ok


def _detach(sample: Any) -> Any:
    """Copy array views of a packed sample so they outlive the read buffer."""
    if isinstance(sample, dict):
        return {k: _detach(v) for k, v in sample.items()}
    if isinstance(sample, np.ndarray) and not sample.flags.owndata:
        return sample.copy()
    return sample


def prepare(ctx: Context, stages: tuple[Stage, ...], job: Job, worker: str,
            record: Record | None, into: Into | None = None) -> Prepared:
    """Read the samples of ``job`` and run ``stages`` on each (the per-sample path).

    ``into`` (see :class:`~feedline.pipeline.stages.Decode`): the batch slot's arrays of
    fields to decode straight into it. Sample ``i`` of the result then usually holds a
    view of row ``i`` (``collate.fill`` skips rows already in place); an image that does
    not fit its row, or a batch that needed refilling, ends up as separate arrays that
    ``fill`` copies in as usual.

    Raises:
        WorkerError: a sample failed and ``on_error="raise"``, or too many failed
            to refill the batch.
    """
    want = len(job.indices)
    out = Prepared([], [])
    pending, refill = list(job.indices), list(job.refill)
    attrs = job.span_attrs(worker)
    while pending:
        t0, c0 = time.perf_counter(), time.thread_time()
        items = ctx.source.fetch(pending)
        if record is not None:  # with its CPU seconds: item code may compute, not only read
            record("read", t0, time.perf_counter(), attrs | {"cpu": time.thread_time() - c0})
        live, failed = _run_stages(stages, items, record, attrs, into or {}, len(out.samples))
        if failed and ctx.on_error == "raise":
            order = {id(it): k for k, it in enumerate(items)}
            item, stage, exc = min(failed, key=lambda f: order[id(f[0])])
            raise worker_error(exc, item, stage, worker, ctx.source.shard_of(item),
                               ctx.source.file_of(item))
        for item, stage, exc in failed:
            skip = {"key": item.key, "stage": stage, "error": type(exc).__name__, "message": exc_text(exc)[:200]}
            file = ctx.source.file_of(item)
            out.skipped.append(skip if file is None else {**skip, "file": file})
        out.samples += [sample for _, sample in live]  # three list builds, not three appends a sample
        out.keys += [item.key for item, _ in live]
        out.indices += [item.index for item, _ in live]
        missing = want - len(out.samples)
        if missing and not refill:
            raise _cannot_refill(out.skipped, job.batch_id, worker)
        if missing and ctx.source.packed:
            out.samples = [_detach(s) for s in out.samples]
        pending, refill = refill[:missing], refill[missing:]
    return out


def _cannot_refill(skipped: list[dict[str, str]], batch_id: int, worker: str) -> WorkerError:
    """Too many bad samples for one batch: what failed, where, and the fix that fits."""
    causes = Counter((s["stage"], s["error"]) for s in skipped)
    (stage, _), _ = causes.most_common(1)[0]
    summary = ", ".join(f"{n} x {e} in {st}" for (st, e), n in causes.most_common(3))
    data_stages = ("read", "decode", "verify")
    fix = ("repair the dataset (feedline verify) or lower batch_size" if stage in data_stages
           else f"fix the {stage} function: it fails on most samples (on_error='raise' shows the first "
                "traceback)")
    return WorkerError(
        f"{len(skipped)} bad samples ({summary}); not enough good ones left to refill batch {batch_id}",
        worker=worker, stage=stage, fix=fix,
    )
