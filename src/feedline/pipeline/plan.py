"""The batch plan: how each field of a batch is filled, decided once.

When the layout is known (from batch 0, see :mod:`feedline.pipeline.collate`),
:func:`make_plan` gives every field a *recipe* and freezes the result in a
:class:`BatchPlan`, which thread workers share and process workers receive
pickled once. The hot path (:func:`fill`) only executes it:

========================  =============================================================
recipe                    what fills the field's slot rows
========================  =============================================================
``gather``                an integer label column of the dataset's index, or a column of
                          small raw / npy values (64 bytes a sample at most), gathered
                          by sample index (``gather_columns``): no read, no parse
``read-rows``             the stored bytes are the rows (raw tensors, ``.npy`` payloads):
                          read straight into the slot (``read_fields_into``)
``take-rows``             a ``TensorDataset``'s rows, gathered by sample index with one
                          ``index_select`` per tensor straight into the slot
                          (:mod:`feedline.pipeline.tensor_rows`)
``decode-rows``           a JPEG decoded straight into its row; with ``decode_size``,
                          any image field it applies to, decoded and resized into its
                          row (:mod:`feedline.decode.resized`). Only its bytes are read
                          (``read_fields``), one view per sample: no sample dict, no
                          per-sample stage
``sample``                decoded, transformed and checked per sample, then stacked
                          (dense) or listed (ragged)
``custom``                the user's ``collate=`` over the per-sample results
========================  =============================================================

A batch mixes recipes field by field (``jpg + cls``: images decoded into rows,
labels gathered). A batch with no ``sample`` field is filled *directly* (rows
read, images decoded into rows, labels gathered: no per-sample Python beyond one
decode call per image); ``read-rows`` applies only then (when some field needs
the per-sample path the sample is read anyway, and a ``decode-rows`` field is
decoded into its row by the per-sample decode stage); with a ``transform`` every
field is ``sample`` (it may change anything). No batch is read twice: an image of
another size in a direct batch is decoded again from the bytes already read, as the
per-sample path decodes it, and the batch gives that field as a list
(:func:`with_lists`). Only a direct batch that fails (a damaged sample, one over
``max_bytes`` or lacking the field) is redone on the per-sample path, which raises
or skips with shard, key and field, exactly as it always does.

This module does not import torch (process workers run it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from feedline.decode.registry import extension
from feedline.errors import DecodeError, FeedlineError
from feedline.pipeline import collate, heap, tensor_rows
from feedline.pipeline.jobs import Context, Job, Record, prepare, worker_error
from feedline.pipeline.stages import Check, DropFields, Stage

GATHER = "gather"
READ_ROWS = "read-rows"
TAKE_ROWS = "take-rows"
DECODE_ROWS = "decode-rows"
SAMPLE = "sample"
CUSTOM = "custom"

READ_CHUNK = 16
"""Samples whose compressed bytes a ``decode-rows`` batch reads at a time (then decodes into
their rows): the read buffer holds 16 images, not the batch's (W1, 64 JPEGs of 56 KB: a
1 MiB buffer per worker instead of 4 MiB), for no measurable cost per batch."""


@dataclass(frozen=True)
class BatchPlan:
    """The recipe of every field, and the stages of the per-sample part (frozen)."""

    layout: collate.Layout | None
    """The batch layout; ``None`` with a custom collate (it builds the batch itself)."""
    recipes: tuple[tuple[str, str], ...]
    """(field, recipe) in layout order; nested leaves are named by their path with ``/``."""
    stages: tuple[Stage, ...]
    """Per-sample stages of the ``sample`` / ``decode-rows`` fields (checked last)."""
    fallback: tuple[Stage, ...]
    """Per-sample stages for every field: the path a failed ``read-rows`` batch is redone on."""
    sample_layout: collate.Layout | None = None
    """The layout of what the per-sample stages deliver (gathered fields left out)."""
    custom: bool = False
    swapped: tuple[str, ...] = ()
    """``read-rows`` fields stored in the other byte order (a big-endian ``.npy``): their
    rows are byte-swapped in place after the read, giving native values."""

    per_sample: bool = True
    """Whether batches take the per-sample path (custom, some ``sample`` field, or images
    to decode from a reader that does not read into host memory); else they are filled
    directly."""
    part_rows: int = 0
    """Rows per part when thread workers split a direct batch among themselves
    (:mod:`feedline.pipeline.split`, chosen from the probe's measured cost); ``0``: each
    batch is one worker's."""

    def fields(self, recipe: str) -> list[str]:
        return [name for name, r in self.recipes if r == recipe]

    def describe(self) -> dict[str, str]:
        """Field -> recipe (what ``loader.stats["recipes"]`` shows)."""
        return dict(self.recipes)


@dataclass
class Filled:
    """A batch filled into slot arrays: keys, the ragged leaves and the skipped samples."""

    keys: list[str]
    ragged: dict[collate.Path, list[Any]] = field(default_factory=dict)
    skipped: list[dict[str, str]] = field(default_factory=list)
    custom: Any = None
    misfits: dict[str, dict[int, Any]] = field(default_factory=dict)
    """``decode-rows`` fields of a direct batch with images of another size: field -> slot
    row -> the image decoded on its own (the batch gives the field as a list, see
    :func:`with_lists`)."""


def _leaf_name(leaf: collate.Leaf) -> str:
    return "/".join(map(str, leaf.path))


def _builtin(ctx: Context, name: str) -> bool:
    """Whether field ``name`` is decoded by its built-in codec (no user override)."""
    overrides = ctx.decoders.overrides
    return name not in overrides and extension(name) not in overrides


def _label_fields(ctx: Context) -> set[str]:
    """Fields the dataset holds as integer label columns of its index (schema ``label``)."""
    if not ctx.source.can_gather:
        return set()
    return {name for name in ctx.source.label_fields if _builtin(ctx, name)}


def _gathers(ctx: Context, leaf: collate.Leaf, labels: set[str]) -> bool:
    """Whether ``leaf``'s field is a column of the index whose values are the leaf's
    (an int64 label; a raw / npy column of the leaf's shape and native dtype)."""
    name = leaf.path[0]
    if name in labels:
        return leaf.shape == () and leaf.dtype == np.dtype(np.int64).str
    fs = ctx.source.column_fields.get(name) if ctx.source.can_gather else None
    return (fs is not None and _builtin(ctx, name) and tuple(fs.shape) == leaf.shape
            and np.dtype(fs.dtype).newbyteorder("=").str == leaf.dtype)


def _row_readable(ctx: Context, leaf: collate.Leaf) -> bool:
    """Whether the stored bytes of ``leaf``'s field are exactly its row (raw or npy)."""
    name = leaf.path[0]
    if leaf.shape is None or not isinstance(name, str) or not ctx.source.columnar:
        return False
    dtype = ctx.decoders.raw_dtype(name)
    if dtype is not None:
        return len(leaf.shape) == 1 and dtype == np.dtype(leaf.dtype)
    fs = _npy_schema(ctx, name)
    return (fs is not None and ctx.source.reads_npy and _builtin(ctx, name) and tuple(fs.shape) == leaf.shape
            and np.dtype(fs.dtype).newbyteorder("=").str == leaf.dtype)


def _npy_schema(ctx: Context, name: str) -> Any:
    """The packed dataset's schema of field ``name`` when it is an ``npy`` field, else None."""
    schema = getattr(ctx.source.dataset, "schema", None)
    fs = schema.get(name) if isinstance(schema, Mapping) else None
    return fs if getattr(fs, "kind", None) == "npy" else None


def _swapped(ctx: Context, name: str) -> bool:
    """Whether a ``read-rows`` field is stored in the other byte order (the codec gives it
    native, so the rows read as stored must be byte-swapped)."""
    fs = _npy_schema(ctx, name)
    return fs is not None and not np.dtype(fs.dtype).isnative


def _recipe(ctx: Context, leaf: collate.Leaf, labels: set[str]) -> str:
    name = leaf.path[0]
    if leaf.shape is None or not isinstance(name, str):
        return SAMPLE
    if _gathers(ctx, leaf, labels):
        return GATHER
    if _row_readable(ctx, leaf):
        return READ_ROWS
    if ctx.decoders.decodes_into(name):
        return DECODE_ROWS
    return SAMPLE


def _without(layout: collate.Layout, names: set[str]) -> collate.Layout:
    """``layout`` of a flat sample less the top-level fields ``names``."""
    skeleton = {k: v for k, v in layout.skeleton.items() if k not in names}
    leaves = tuple(leaf for leaf in layout.leaves if leaf.path[0] not in names)
    return collate.Layout(skeleton, leaves, layout.batch_size, layout.max_depth)


def _takes_rows(ctx: Context, layout: collate.Layout) -> bool:
    """Whether every leaf of a map-style dataset's samples is a row of its tensors, as
    given (a ``TensorDataset``'s ``(x, y)``, no transform): batches take rows."""
    if ctx.source.packed or ctx.transform is not None or ctx.stages or not layout.flat_tuple:
        return False
    found = ctx.source.tensor_columns()
    return found is not None and tensor_rows.fits(found[0], layout.leaves)


def make_plan(ctx: Context, layout: collate.Layout | None, *, custom: bool = False) -> BatchPlan:
    """Choose every field's recipe once (see the module docstring)."""
    stages = ctx.sample_stages()
    if custom or layout is None:
        return BatchPlan(None, (("*", CUSTOM),), stages, stages, None, custom=True)
    full = (*stages, Check(layout))
    if _takes_rows(ctx, layout):
        recipes = tuple((_leaf_name(leaf), TAKE_ROWS) for leaf in layout.leaves)
        return BatchPlan(layout, recipes, full, full, layout, per_sample=False)
    direct = ctx.source.packed and ctx.transform is None and not ctx.stages and layout.flat
    if not direct:
        recipes = tuple((_leaf_name(leaf), SAMPLE) for leaf in layout.leaves)
        return BatchPlan(layout, recipes, full, full, layout)
    labels = _label_fields(ctx)
    chosen = [(leaf, _recipe(ctx, leaf, labels)) for leaf in layout.leaves]
    per_sample = any(r == SAMPLE for _, r in chosen) or (
        any(r == DECODE_ROWS for _, r in chosen) and not ctx.source.columnar)
    if per_sample:  # samples are read anyway
        chosen = [(leaf, SAMPLE if r == READ_ROWS else r) for leaf, r in chosen]
    gathered = {str(leaf.path[0]) for leaf, r in chosen if r == GATHER}
    sample_layout = _without(layout, gathered)
    skip = (DropFields(frozenset(gathered)),) if gathered else ()
    recipes = tuple((_leaf_name(leaf), r) for leaf, r in chosen)
    swapped = tuple(name for name, r in recipes if r == READ_ROWS and _swapped(ctx, name))
    return BatchPlan(layout, recipes, (*skip, *stages, Check(sample_layout)), full, sample_layout,
                     swapped=swapped, per_sample=per_sample)


def fill(ctx: Context, plan: BatchPlan, job: Job, worker: str, record: Record | None,
         arrays: Mapping[collate.Path, np.ndarray]) -> Filled:
    """Fill the first rows of the slot ``arrays`` with batch ``job`` following ``plan``.

    Raises:
        WorkerError: a sample failed and ``on_error="raise"`` (shard, key, stage, field).
    """
    if not plan.per_sample:
        done = fill_rows(ctx, plan, job, 0, len(job.indices), worker, record, arrays)
        if done is not None:
            return with_lists(plan, done, arrays)
    return fill_per_sample(ctx, plan, job, worker, record, arrays)


def with_lists(plan: BatchPlan, filled: Filled, arrays: Mapping[collate.Path, np.ndarray]) -> Filled:
    """``filled`` with each field that has misfit images given as a list, as the per-sample
    path gives it: the misfits as decoded, every other sample's image a copy of its row
    (the slot is reused; the list outlives it)."""
    if not filled.misfits:
        return filled
    ragged = dict(filled.ragged)
    for name, found in filled.misfits.items():
        rows = arrays[(name,)]
        ragged[(name,)] = [found[r] if r in found else rows[r].copy() for r in range(len(filled.keys))]
    return Filled(filled.keys, ragged, filled.skipped, filled.custom)


def fill_per_sample(ctx: Context, plan: BatchPlan, job: Job, worker: str,
                    record: Record | None, arrays: Mapping[collate.Path, np.ndarray]) -> Filled:
    """Batch ``job`` on the per-sample path: the plan's own for a per-sample plan, else the
    path a direct batch that failed is redone on (every field per sample, which places the
    error, skips and refills, or gives a misfit field as a list).

    Raises:
        WorkerError: a sample failed and ``on_error="raise"`` (shard, key, stage, field).
    """
    layout = plan.layout
    assert layout is not None
    sample_layout: collate.Layout | None
    if not plan.per_sample:
        stages, sample_layout, gathered = plan.fallback, layout, []
    else:
        stages, sample_layout, gathered = plan.stages, plan.sample_layout, plan.fields(GATHER)
    into = {f: arrays[(f,)] for f in plan.fields(DECODE_ROWS)} if stages is plan.stages else {}
    prep = prepare(ctx, stages, job, worker, record, into)
    assert sample_layout is not None
    t0 = time.perf_counter()
    ragged = collate.fill(sample_layout, arrays, prep.samples, into={(f,) for f in into})
    if gathered:
        n = len(prep.indices)
        ctx.source.gather(prep.indices, {f: arrays[(f,)][:n] for f in gathered})
    if record is not None:
        record("collate", t0, time.perf_counter(), job.span_attrs(worker))
    return Filled(prep.keys, ragged, prep.skipped)


def fill_rows(ctx: Context, plan: BatchPlan, job: Job, lo: int, hi: int, worker: str,
              record: Record | None, arrays: Mapping[collate.Path, np.ndarray]) -> Filled | None:
    """Rows ``lo:hi`` of a batch of a direct plan (no per-sample field): samples
    ``job.indices[lo:hi]`` read into their rows, images decoded into their rows, labels
    gathered. Several workers may fill disjoint row ranges of one slot at once
    (:mod:`feedline.pipeline.split`). Images of another size are kept in the result's
    ``misfits`` (see :func:`with_lists`). ``None`` when that fails (a damaged sample, one
    over ``max_bytes`` or without the field): the whole batch is then redone by
    :func:`fill_per_sample`, which places the error or skips.
    """
    assert not plan.per_sample
    attrs = job.span_attrs(worker)
    indices = job.indices[lo:hi]
    n = len(indices)
    t0 = time.perf_counter()
    read, decoded = plan.fields(READ_ROWS), plan.fields(DECODE_ROWS)
    misfits: dict[str, dict[int, Any]] = {}
    if plan.fields(TAKE_ROWS):
        return _take_rows(ctx, plan, job, lo, hi, worker, record, arrays)
    try:
        if read or not decoded:
            keys = ctx.source.read_columns(indices, {f: arrays[(f,)][lo:hi] for f in read})
        for f in plan.swapped:
            arrays[(f,)][lo:hi].byteswap(inplace=True)
        if decoded:
            keys = []
            for at in range(0, n, READ_CHUNK):
                got, views = ctx.source.read_fields(indices[at : at + READ_CHUNK], decoded)
                keys += got
                t1, c1 = time.perf_counter(), time.thread_time()
                if record is not None:
                    record("read", t0, t1, attrs)
                if not (_decode_rows(ctx.decoders, views, arrays, lo + at)
                        or _decode_misfits(ctx.decoders, plan, views, got, arrays, lo + at, misfits)):
                    return None
                del views  # its buffer is idle again before the next chunk is read
                t0 = time.perf_counter()
                if record is not None:
                    record("decode", t1, t0, attrs | {"cpu": time.thread_time() - c1})
        gathered = plan.fields(GATHER)
        if gathered:
            ctx.source.gather(indices, {f: arrays[(f,)][lo:hi] for f in gathered})
    except FeedlineError:  # redone per sample: the error raised there names its place
        return None
    if record is not None:
        record("collate" if decoded else "read", t0, time.perf_counter(), attrs)
    return Filled(keys, misfits=misfits)


def _take_rows(ctx: Context, plan: BatchPlan, job: Job, lo: int, hi: int, worker: str,
               record: Record | None, arrays: Mapping[collate.Path, np.ndarray]) -> Filled | None:
    """Rows ``lo:hi`` of a ``take-rows`` batch (see :func:`fill_rows`); ``None`` when the
    take fails (an index outside the dataset): redone per sample, which names it."""
    assert plan.layout is not None
    t0, c0 = time.perf_counter(), time.thread_time()
    out = {i: arrays[leaf.path][lo:hi] for i, leaf in enumerate(plan.layout.leaves)}
    try:
        keys = ctx.source.take_rows(job.indices[lo:hi], out)
    except Exception:  # the per-sample redo raises it, with its index
        return None
    if record is not None:
        record("read", t0, time.perf_counter(), job.span_attrs(worker) | {"cpu": time.thread_time() - c0})
    return Filled(keys)


def _decode_rows(decoders: Any, views: Mapping[str, list[Any]],
                 arrays: Mapping[collate.Path, np.ndarray], base: int) -> bool:
    """Decode ``views[f][i]`` into row ``base + i`` of field ``f``'s slot array; False at the
    first sample that lacks the field, exceeds ``max_bytes`` or is not of the row's shape
    (see :mod:`feedline.decode.rows`)."""
    return all(decoders.rows_codec(name)(column, arrays[(name,)], base)
               for name, column in views.items())


def _decode_misfits(decoders: Any, plan: BatchPlan, views: Mapping[str, list[Any]], keys: list[str],
                    arrays: Mapping[collate.Path, np.ndarray], base: int,
                    misfits: dict[str, dict[int, Any]]) -> bool:
    """A chunk :func:`_decode_rows` refused, decoded again from the bytes already read, one
    image at a time as the per-sample path decodes it: an image of the row's shape and dtype
    into its row, any other into ``misfits[field][row]`` (so the batch is not read twice).
    False when a sample lacks the field or fails to decode (the batch is then redone per
    sample, which raises or skips naming shard, key and field)."""
    assert plan.layout is not None
    leaves = {leaf.path[0]: leaf for leaf in plan.layout.leaves}
    photo = decoders.photo_field(tuple(leaves))
    for name, column in views.items():
        rows, leaf = arrays[(name,)], leaves[name]
        for i, data in enumerate(column):
            if data is None:
                return False
            try:
                value = decoders.decode_field(name, data, key=keys[i], photo=name == photo)
            except FeedlineError:
                return False
            if collate.fits(leaf, value):
                rows[base + i] = value
            else:  # (a copy if a view: the list outlives the read buffer)
                own = not isinstance(value, np.ndarray) or value.flags.owndata
                misfits.setdefault(name, {})[base + i] = value if own else value.copy()
    return True


def probe_batch(ctx: Context, job: Job, worker: str, record: Record | None, batch_size: int,
                slot_for: Callable[[collate.Layout], Mapping[collate.Path, np.ndarray]]
                ) -> tuple[collate.Layout, Filled]:
    """Batch 0 of the plan: prepare it per sample, infer the layout from its samples, then
    fill the arrays ``slot_for(layout)`` gives (a pool slot, or fresh arrays in a process
    worker). A sample whose structure does not fit the layout (:mod:`.collate`) is a bad sample as in any
    batch (``on_error`` decides; skipping redoes the batch on the plan's path).

    Raises:
        WorkerError: a sample failed and ``on_error="raise"``.
    """
    prep = prepare(ctx, ctx.sample_stages(), job, worker, record)
    depth = 1 if ctx.source.packed else 8
    layout = collate.infer_layout(prep.samples, batch_size, depth, ctx.known_fields())
    arrays = slot_for(layout)
    t0 = time.perf_counter()
    for k, sample in enumerate(prep.samples):
        try:
            collate.check(layout, sample)
        except DecodeError as exc:
            if ctx.on_error == "raise":
                item = ctx.source.item(prep.indices[k], prep.keys[k])
                raise worker_error(exc, item, "collate", worker, ctx.source.shard_of(item),
                                   ctx.source.file_of(item)) from None
            return layout, fill(ctx, make_plan(ctx, layout), job, worker, record, arrays)
    ragged = collate.fill(layout, arrays, prep.samples, into=())  # nothing decoded in place
    if record is not None:
        record("collate", t0, time.perf_counter(), job.span_attrs(worker))
    filled = Filled(prep.keys, ragged, prep.skipped)
    del prep  # its samples: a batch of fresh arrays, now copied into the slot
    heap.trim()  # later batches fill slots directly: give those pages back (see heap)
    return layout, filled
