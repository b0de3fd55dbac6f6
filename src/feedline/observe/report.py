"""The report of one measured run: stage percentiles, stall, verdict, model, advice.

:func:`build_report` turns :class:`Measurements` (what a watch or a diagnose
run collected for the training loader) into a :class:`Report`. The verdict
comes from what was measured (the stall fraction, and the data path's own time
against the compute step); the binding stage names what the time is:

* ``read``: time a fetch spent blocked (I/O, sleep, a lock), under any loader;
* ``decode`` / ``transform``: CPU time in the dataset's item code (DataLoader)
  or in the Loader's decode / transform stages;
* ``collate``: the collate function;
* ``device_decode``: decoding after delivery (``Loader(decode_on=...)``), on the
  consumer's side of the loader, where workers do not share it;
* ``sampler``: a DataLoader's sampler (or batch sampler) drawing the next indices,
  which runs in the training process whatever ``num_workers`` is: workers do not
  share it either;
* ``loop_transform``: what the training loop does with a batch after it arrives and
  before the model's first forward (augmentation on the batch tensor, ``x =
  augment(x)`` on the training thread; copies to the device left out): data work
  that workers could do while the step runs, so it counts in the data stall and not
  in the step's compute;
* ``h2d``: host-to-device copies; ``gpu``: the step itself;
* ``startup``: a DataLoader starting its worker processes again at each new
  iterator (each epoch without ``persistent_workers``, or ``next(iter(loader))``
  every step), when those first waits are most of the stall.

Advice comes from the binding stage (see :func:`_recommend`), and the
predicted gain is the model's step time after that change against the
measured one. Every other loader (validation, say) gets its own line
(:func:`other_loader`). When something cannot be measured the verdict is
``"unknown"`` with the reason and the fix.
"""

from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from feedline.model.analytic import analyze
from feedline.observe._stats import EMPTY_STATS, Span, StageStats, summarize
from feedline.observe.findings import (
    STEP_CONTENTION,
    Finding,
    LongSteps,
    RunFacts,
    detect,
    handoff,
    loader_call,
    long_steps,
    prefetch_depth,
    recommended_workers,
    set_threads_advice,
    worker_processes,
)

if TYPE_CHECKING:
    from feedline.placement import Placement

VERDICTS = ("data-bound", "compute-bound", "balanced", "unknown")
DATA_BOUND_STALL = 0.25
COMPUTE_BOUND_STALL = 0.15
BALANCED_RATIO = 0.7
DATA_STAGES = ("read", "decode", "transform", "collate")
AFTER_STAGES = ("device_decode", "sampler", "loop_transform")
"""Stages a loader runs on each batch as it delivers it (on the consumer's thread)."""
CUT = {
    "read": "fewer, larger reads (pack small files into shards), a closer or faster store, a cache",
    "decode": "cheaper decode (smaller inputs, a faster codec, decode on the GPU, or decode once "
              "ahead and store the arrays)",
    "transform": "a cheaper transform (fewer or fused augmentations, or on the GPU)",
    "collate": "a cheaper collate (preallocate, no per-sample Python loop)",
    "": "pack small files into shards, cheaper decode",
}
"""What cuts the cost of each binding stage, when more workers cannot help."""
MAX_IO_WORKERS = 64
HEADROOM = 1.25
GIL_BOUND_WAIT = 0.002
"""A thread waking from sleep waits this long for the GIL (mean): Python threads hold it."""


@dataclass
class Measurements:
    """Raw results of one run (seconds). ``wait``/``body``/``gpu`` are per step."""

    name: str
    device_type: str
    wait: list[float]
    body: list[float]
    gpu: list[float]
    spans: list[Span]
    step_starts: list[float] = field(default_factory=list)
    wait_runq: list[float] = field(default_factory=list)
    """Per step: time of the wait the training thread spent queued for a CPU core."""
    body_runq: list[float] = field(default_factory=list)
    """Seconds the training thread waited for a CPU core inside each step body."""
    copy_times: list[float] = field(default_factory=list)
    blocking_copy_s: float = 0.0
    """Total time of copies that block the step (pageable, or without non_blocking)."""
    device: str = ""
    """The loop's device as given (``"cuda:1"``, ``"cuda"``: the current device); "" if unknown."""
    copies: dict[str, int] = field(default_factory=dict)
    loader: dict[str, Any] = field(default_factory=dict)
    batch_samples: int | None = None
    batch_bytes: int | None = None
    host: dict[str, Any] = field(default_factory=dict)
    ab: dict[str, Any] | None = None
    pinned_series: list[float] = field(default_factory=list)
    cores: int = 1
    gpus: int = 1
    shm_free: int | None = None
    warmup: int = 1
    wall: float = 0.0
    quiet: float = 0.0
    """Seconds from the last batch any hooked loader delivered to the end of the run."""
    """Seconds the whole measured run took (all loaders, all threads)."""
    loaders_other: list[dict[str, Any]] = field(default_factory=list)
    """:func:`other_loader` summaries of the loaders that are not the training one."""
    extra_spans: list[Span] = field(default_factory=list)
    """Spans of other loaders: kept for the trace, not in the training figures."""
    pass_first: list[int] = field(default_factory=list)
    """Steps that open the second and later passes (epochs) over the loader."""
    draw_waits: list[float] = field(default_factory=list)
    """The waits of each ``next()`` when a step takes several (else empty: ``wait``)."""
    draws_per_step: float = 1.0
    """Loader batches (``next()`` calls) per step: more than 1 when a step takes several
    (see :func:`~feedline.observe._clock.group_draws`); the per-batch figures are then per
    step's batches."""


@dataclass
class Report:
    """Where each step's time went. Times in seconds; see :meth:`to_dict` for JSON."""

    name: str
    device: str
    steps: int
    stages: dict[str, StageStats]
    step_time: StageStats
    stall_fraction: float
    samples_per_s: float | None
    gpu_utilisation: float | None
    verdict: str
    binding: str
    analysis: dict[str, Any]
    findings: list[Finding]
    predicted_gain: float | None
    recommendation: str
    host: dict[str, Any]
    loader: dict[str, Any] = field(default_factory=dict)
    copies: dict[str, int] = field(default_factory=dict)
    ab: dict[str, Any] | None = None
    timeline: list[list[float]] = field(default_factory=list, repr=False)
    spans: list[Span] = field(default_factory=list, repr=False)
    loaders: list[dict[str, Any]] = field(default_factory=list)
    """Every loader but the training one: label, steps, share of wall time, waits, advice."""
    reason: str = ""
    """Why the verdict or binding is "unknown" (empty when both were measured)."""
    fix: str = ""
    """What to do about an "unknown"."""

    def to_dict(self, include_spans: bool = False) -> dict[str, Any]:
        """A JSON-able dict (spans only with ``include_spans``: they can be large)."""
        out = {
            "name": self.name, "device": self.device, "steps": self.steps,
            "stages": {k: v.to_dict() for k, v in self.stages.items()},
            "step_time": self.step_time.to_dict(), "stall_fraction": self.stall_fraction,
            "samples_per_s": self.samples_per_s, "gpu_utilisation": self.gpu_utilisation,
            "verdict": self.verdict, "binding": self.binding, "reason": self.reason,
            "fix": self.fix, "analysis": self.analysis,
            "findings": [f.to_dict() for f in self.findings],
            "predicted_gain": self.predicted_gain, "recommendation": self.recommendation,
            "host": self.host, "loader": self.loader, "loaders": self.loaders,
            "copies": self.copies, "ab": self.ab, "timeline": self.timeline,
        }
        if include_spans:
            out["spans"] = [s.to_list() for s in self.spans]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Report:
        """Rebuild a report written by :meth:`to_dict`."""
        return cls(
            name=d["name"], device=d["device"], steps=int(d["steps"]),
            stages={k: StageStats.from_dict(v) for k, v in d["stages"].items()},
            step_time=StageStats.from_dict(d["step_time"]),
            stall_fraction=float(d["stall_fraction"]), samples_per_s=d.get("samples_per_s"),
            gpu_utilisation=d.get("gpu_utilisation"), verdict=d["verdict"],
            binding=d["binding"], analysis=dict(d.get("analysis") or {}),
            findings=[Finding(**f) for f in d.get("findings", [])],
            predicted_gain=d.get("predicted_gain"), recommendation=d.get("recommendation", ""),
            host=dict(d.get("host") or {}), loader=dict(d.get("loader") or {}),
            copies=dict(d.get("copies") or {}), ab=d.get("ab"),
            timeline=[list(r) for r in d.get("timeline", [])],
            spans=[Span.from_list(s) for s in d.get("spans", [])],
            loaders=list(d.get("loaders") or []), reason=d.get("reason", ""),
            fix=d.get("fix", ""),
        )

    @classmethod
    def unknown(cls, name: str, device: str, reason: str, fix: str, *,
                loaders: list[dict[str, Any]] | None = None, steps: int = 0) -> Report:
        """A report that says honestly that the run could not be judged."""
        return cls(name=name, device=device, steps=steps, stages={}, step_time=EMPTY_STATS,
                   stall_fraction=0.0, samples_per_s=None, gpu_utilisation=None,
                   verdict="unknown", binding="unknown", analysis={}, findings=[],
                   predicted_gain=None, recommendation=fix, host={}, loaders=list(loaders or []),
                   reason=reason, fix=fix)


def cpu_demand(wall: float, cpu: float, runq: float) -> float:
    """The CPU part of a fetch: CPU time plus its share of the run-queue delay.

    On a busy host a thread waits for a core both while computing (preempted)
    and after each I/O wake-up. The delay is split in the proportion of CPU
    time to the rest of the un-queued time, so a CPU-bound decode keeps its
    delay and an I/O-bound read keeps its own.
    """
    active = max(wall - runq, 1e-12)
    share = min(1.0, cpu / active)
    return min(wall, cpu + runq * share)


@dataclass
class PerBatch:
    """Mean per-batch seconds of each stage of the training loader, and how they were found."""

    read: float = 0.0
    decode: float = 0.0
    transform: float = 0.0
    collate: float = 0.0
    h2d: float = 0.0
    gpu: float = 0.0
    after: float = 0.0
    """Stages run after delivery (:data:`AFTER_STAGES`), in the loop or ahead of it on one
    thread (a decode-ahead's ``decode`` spans, when present, are this time): not shared by
    workers."""
    after_stage: str = "device_decode"
    """Which of :data:`AFTER_STAGES` takes most of :attr:`after`."""
    loop: float = 0.0
    """The ``loop_transform`` part of :attr:`after`: the loop's own work on each batch
    before the model's forward, inside the step body (taken out of :attr:`gpu`)."""
    measured: bool = False
    """Whether any loader stage was seen (else ``read`` is only the wait)."""
    gil_bound: bool = False
    """Thread workers whose stage time is mostly waiting for the GIL (not blocked on I/O)."""
    gil_share: float = 0.0
    """CPU seconds of the decode/transform stages per second of the run."""
    gil_wait: float = 0.0
    """Mean wait for the GIL of a probe thread waking from sleep (see ``_host.gil_wait``)."""
    threads: int = 0
    """Thread workers in the training process (feedline.Loader ``worker_type="thread"``)."""
    data_cpu: float = 0.0
    """CPU seconds of the data path's stages per batch (their threads' own CPU time)."""
    crowded: bool = False
    """Thread workers take the cores the training thread needs (set by the report)."""
    width: float = 1.0
    """Processes a fetch keeps on the CPU at once (a dataset decoding on its own pool of 2:
    2), weighted by fetch time: each worker then needs that many cores."""
    fetch_p99: float = 0.0
    """p99 of the time one batch takes to prepare (fetch + collate, or the Loader's stages)."""
    gpu_p50: float = 0.0
    """Median step body (the mean can carry a few very long steps)."""

    @property
    def cpu(self) -> float:
        return self.decode + self.transform + self.collate

    @property
    def data(self) -> float:
        return self.read + self.cpu

    @property
    def blocked_fraction(self) -> float:
        return self.read / self.data if self.data > 0 else 0.0


def _window(m: Measurements) -> list[Span]:
    """Spans after the warm-up (worker start, first fetch), as the step statistics."""
    t_from = m.step_starts[m.warmup] if len(m.step_starts) > m.warmup else float("-inf")
    window = [s for s in m.spans if s.start >= t_from]
    if not any(s.stage in ("fetch", "collate", "decode", "read") for s in window):
        window = m.spans
    return window


def _per_batch(m: Measurements, steps: int) -> PerBatch:
    """Split the training loader's measured time into blocked (read) and CPU stages."""
    window = _window(m)
    by: dict[str, list[Span]] = {}
    for s in window:
        by.setdefault(s.stage, []).append(s)
    # A Loader's decode after delivery runs ahead on its own thread (``decode`` spans marked
    # ``after_delivery``): the after-delivery stage's work, which workers do not share.
    after_decode = [s for s in by.get("decode", []) if s.attrs.get("after_delivery")]
    if after_decode:
        by["decode"] = [s for s in by["decode"] if not s.attrs.get("after_delivery")]
    pb = PerBatch()
    # Fetches on the consumer thread carry a sampled run-queue delay (see RUNQ_EVERY):
    # the unsampled ones get the sampled fetches' delay per second.
    fetches = by.get("fetch", [])
    sampled = [s for s in fetches if "runq" in s.attrs]
    sampled_wall = sum(s.duration for s in sampled)
    runq_rate = sum(float(s.attrs["runq"]) for s in sampled) / sampled_wall if sampled_wall else 0.0
    read = sum(s.duration for s in by.get("read", []))
    # Stages that carry only their CPU time (the Loader's, an external decoder's) get the
    # loader threads' measured run-queue delay per CPU second: on a busy host a CPU-bound
    # stage also waits for a core.
    queued = float(m.host.get("loader_runq_per_cpu") or 0.0)
    cpu: dict[str, float] = {"decode": 0.0, "transform": 0.0, "collate": 0.0}
    wide = sum(s.duration for s in fetches)
    if wide > 0:
        pb.width = sum(s.duration * max(1, int(s.attrs.get("child_procs", 1))) for s in fetches) / wide
    for s in fetches:  # DataLoader: the dataset's item code, blocked part and CPU part
        runq = float(s.attrs["runq"]) if "runq" in s.attrs else runq_rate * s.duration
        # a child process the items waited for (an external decoder) was on the CPU
        kids = float(s.attrs.get("child_cpu", 0.0)) * (1.0 + queued)
        c = min(s.duration, cpu_demand(s.duration, float(s.attrs.get("cpu", 0.0)), runq) + kids)
        cpu["decode"] += c
        read += s.duration - c
    kind = m.loader.get("worker_kind") or m.loader.get("worker_type")  # auto: what it chose
    threads = kind == "thread" and int(m.loader.get("num_workers") or 0) >= 1
    pb.threads = int(m.loader.get("num_workers") or 0) if threads else 0
    stage_cpu = sum(float(s.attrs.get("cpu", s.duration)) for k in ("decode", "transform")
                    for s in by.get(k, []))
    # The Loader's read stage (the dataset's item code) carries its CPU time too: Python
    # parsing or numpy work in ``__getitem__`` is CPU (decode), as a DataLoader fetch's is.
    timed_reads = [s for s in by.get("read", []) if "cpu" in s.attrs]
    read_cpu = sum(float(s.attrs["cpu"]) for s in timed_reads)
    span_s = _span_of(window)
    # Thread workers running Python hold the GIL in turn: their CPU adds up to about
    # one core, and the rest of each stage is waiting for the GIL, not for I/O.
    pb.gil_share = (stage_cpu + read_cpu) / span_s if span_s > 0 else 0.0
    pb.gil_wait = float(m.host.get("gil_wait_ms") or 0.0) / 1e3
    pb.gil_bound = threads and pb.gil_wait >= GIL_BOUND_WAIT
    # Under the GIL a read that keeps half a core busy is Python work: its time waiting
    # is for the GIL, not for I/O (a blocked read holds no CPU and keeps its time).
    cpu_reads = pb.gil_bound and span_s > 0 and read_cpu / span_s >= 0.5
    for s in timed_reads:  # a decoder process the worker thread waited on (child_cpu) is CPU
        c = s.duration if cpu_reads else min(s.duration, (float(s.attrs["cpu"]) + float(
            s.attrs.get("child_cpu", 0.0))) * (1.0 + queued))
        cpu["decode"] += c
        read -= c
    for k in ("decode", "transform"):  # feedline.Loader stages carry their CPU time
        for s in by.get(k, []):
            cpu_s = float(s.attrs.get("cpu", s.duration)) + float(s.attrs.get("child_cpu", 0.0))
            c = min(s.duration, cpu_demand(s.duration, cpu_s, float(s.attrs["runq"]))
                    if "runq" in s.attrs else cpu_s * (1.0 + queued))
            cpu[k] += s.duration if pb.gil_bound else c
            read += 0.0 if pb.gil_bound else s.duration - c
    cpu["collate"] = sum(s.duration for s in by.get("collate", []))
    # Batches, not spans: a Loader batch can carry two collate spans (a per-sample collate
    # stage and the fill of the batch slot); its spans carry the pass and the batch id.
    batches = {(s.pid, s.attrs.get("run"), s.attrs["batch"]) for k in DATA_STAGES
               for s in by.get(k, []) if "batch" in s.attrs}
    n = (len(fetches) or len(batches) or len(by.get("collate", []))
         or len(by.get("decode", [])) or len(by.get("read", [])) or max(steps, 1))
    per = n / max(m.draws_per_step, 1.0)  # batches of one step: the figures are per step
    pb.measured = bool(fetches or any(by.get(k) for k in DATA_STAGES))
    pb.read, pb.decode = max(0.0, read) / per, cpu["decode"] / per
    kept = sum(float(s.attrs.get("child_cpu", 0.0)) for k in ("read", "decode", "transform")
               for s in by.get(k, []))
    pb.data_cpu = (stage_cpu + read_cpu + kept + sum(float(s.attrs.get("cpu", 0.0))
                                              + float(s.attrs.get("child_cpu", 0.0)) for s in fetches)
                   + cpu["collate"]) / per
    pb.transform, pb.collate = cpu["transform"] / per, cpu["collate"] / per
    # each stage's mean per batch (a batch has one span of each): their sum is the time
    after_by = ({"device_decode": [s.duration for s in after_decode]} if after_decode else
                {k: [s.duration for s in by[k]] for k in AFTER_STAGES if by.get(k)})
    # a step of several draws has one loop_transform (from its last draw to the forward)
    mean_by = {k: sum(v) / len(v) * (1.0 if k == "loop_transform" else max(m.draws_per_step, 1.0))
               for k, v in after_by.items()}
    pb.after = sum(mean_by.values())
    pb.loop = mean_by.get("loop_transform", 0.0)
    if mean_by:
        pb.after_stage = max(mean_by, key=lambda k: mean_by[k])
    pb.h2d = sum(m.copy_times) / max(steps, 1) if m.copy_times else (
        sum(s.duration for s in by.get("h2d", [])) / per)
    gpu_src = m.gpu[m.warmup:] or m.gpu
    pb.gpu = sum(gpu_src) / len(gpu_src) if gpu_src else 0.0
    pb.gpu_p50 = summarize(gpu_src).p50 if gpu_src else 0.0
    if pb.loop > 0:  # the loop's work on the batch sits in the body: data time, not compute
        pb.gpu, pb.gpu_p50 = max(0.0, pb.gpu - pb.loop), max(0.0, pb.gpu_p50 - pb.loop)
    if m.device_type == "cuda" and m.copy_times:
        pb.gpu = max(0.0, pb.gpu - pb.h2d)  # copies on the compute stream sit inside the body
    if not pb.measured:  # an opaque iterable: all we know of the data path is the wait
        wait = m.wait[m.warmup:] or m.wait
        pb.read = sum(wait) / len(wait) if wait else 0.0
    pb.fetch_p99 = _fetch_p99(by)
    return pb


def _span_of(spans: list[Span]) -> float:
    data = [s for s in spans if s.stage in DATA_STAGES or s.stage == "fetch"]
    return max(s.end for s in data) - min(s.start for s in data) if data else 0.0


def _fetch_p99(by: dict[str, list[Span]]) -> float:
    """p99 of one batch's preparation time (fetch + collate, or the Loader's stages by batch)."""
    if by.get("fetch"):
        col = by.get("collate", [])
        times = [f.duration + (col[i].duration if i < len(col) else 0.0)
                 for i, f in enumerate(by["fetch"])]
    else:
        per: dict[Any, float] = {}
        for k in ("read", "decode", "transform", "collate"):
            for s in by.get(k, []):
                key = (s.attrs.get("batch"), s.attrs.get("run"), s.pid)
                per[key] = per.get(key, 0.0) + s.duration
        times = list(per.values())
    return summarize(times).p99 if times else 0.0


def _verdict(stall: float, data_time: float, gpu: float, ab: dict[str, Any] | None) -> str:
    if stall >= DATA_BOUND_STALL:
        return "data-bound"
    ratio = data_time / gpu if gpu > 0 else float("inf")
    if stall < COMPUTE_BOUND_STALL and ratio < BALANCED_RATIO:
        verdict = "compute-bound"
    else:
        verdict = "balanced"
    if ab and ab.get("ratio") is not None:
        if float(ab["ratio"]) >= 1.0 / (1.0 - DATA_BOUND_STALL):
            return "data-bound"
        if verdict == "balanced" and float(ab["ratio"]) < 1.05 and ratio < BALANCED_RATIO:
            return "compute-bound"
    return verdict


def io_workers(pb: PerBatch, cores: int) -> int:
    """How many workers the host's cores carry for this data path: each worker keeps a
    core busy only for the CPU part of its fetch, so ``cores / (1 - blocked)`` of them fit."""
    busy = max(1.0 - pb.blocked_fraction, 1.0 / MAX_IO_WORKERS)
    return max(1, min(MAX_IO_WORKERS, math.floor(cores / busy + 1e-9)))


def data_time_with(pb: PerBatch, workers: int, cores: int) -> float:
    """Per-batch data time with ``workers`` parallel workers on ``cores`` cores. A fetch
    that keeps several processes busy at once (a dataset decoding on its own pool) needs
    that many cores for its CPU time, and at least the CPU its threads and children used."""
    cpu = max(pb.cpu * pb.width, pb.data_cpu)
    return max(pb.data / max(workers, 1), cpu / max(cores, 1))


def workers_for(pb: PerBatch, cores: int, gpus: int) -> int:
    """The workers to recommend: enough to hide the data path behind the step, within
    what the cores carry (I/O-bound paths may use more workers than cores). The step to
    hide it behind is the typical one (the median body when shorter than the mean): a
    slow start (warm-up, caches) or a few long steps would size the workers for steps
    the run mostly no longer takes."""
    target = max(min(pb.gpu, pb.gpu_p50) if pb.gpu_p50 > 0 else pb.gpu, 1e-6)
    # a quarter of headroom: workers that exactly match the step stall on every hiccup
    needed = max(1, math.ceil(HEADROOM * pb.data / target - 1e-9)) if pb.data > 0 else 1
    if pb.blocked_fraction >= 0.5:
        return min(needed, io_workers(pb, cores))
    return max(1, min(needed, recommended_workers(cores, gpus)))


UNEVEN = 2.0
"""A worker of an IterableDataset that spends this many times the others' median
preparing its batches reads a slower or larger part of the stream (:func:`uneven_stream`):
the others then sit idle for at least half of each pass."""


def uneven_stream(m: Measurements) -> tuple[int, float, float] | None:
    """The worker of an ``IterableDataset`` whose part of the stream is the slow one, as
    ``(worker id, its seconds, the others' median seconds)``, or None.

    A map-style dataset deals batches to the workers in turn, so a slow batch lands on
    any of them; an iterable one lets ``__iter__`` decide what each worker reads (shards
    dealt by ``get_worker_info()``), so one slow shard stays with one worker, whatever
    the number of workers. It counts when that worker's preparing time (fetch and
    collate, all passes) is :data:`UNEVEN` times the others' median and a fifth of the run.
    """
    if not m.loader.get("iterable"):
        return None
    by: dict[int, float] = {}
    for s in m.spans:
        if s.stage in ("fetch", "collate") and isinstance(s.attrs.get("worker"), int):
            w = int(s.attrs["worker"])
            by[w] = by.get(w, 0.0) + s.duration
    if len(by) < 2:
        return None
    slow = max(by, key=lambda w: by[w])
    rest = sorted(v for w, v in by.items() if w != slow)
    median = rest[len(rest) // 2]
    if by[slow] >= UNEVEN * median and by[slow] >= 0.2 * m.wall:
        return slow, by[slow], median
    return None


def _recommend(m: Measurements, pb: PerBatch, verdict: str, binding: str, step: float,
               w_rec: int, step_p50: float,
               restarts: tuple[float, float, float] = (0.0, 0.0, 0.0),
               step_contention: float = 0.0,
               long: LongSteps | None = None) -> tuple[str, float | None]:
    """The one change the binding stage calls for, and its predicted gain (step / after).

    ``step_contention``: the share of the step body the training thread spent queued for
    a core (a compute-bound step slowed by the loader's workers or other jobs).

    ``long``: long step bodies; when they recur at a period (work in the loop every N
    steps), a compute-bound recommendation names them first.

    ``restarts``: the share of the data stall spent in the first wait of each later
    epoch, those waits' seconds per measured step, and the mean steps per pass
    (below 2: a new iterator every step).
    """
    cfg, cores = m.loader, m.cores
    workers = worker_processes(cfg)
    feedline = bool(cfg.get("feedline"))
    cuda = m.device_type == "cuda"

    def gain(after: float) -> float | None:
        after = max(after, pb.gpu, pb.h2d)
        return step / after if after > 0 else None

    first = (f"{long.said()}: make that work rarer or take it off the training thread; "
             if long is not None and long.every and verdict == "compute-bound" else "")
    if verdict == "compute-bound" and step_contention >= STEP_CONTENTION:
        advice = set_threads_advice(cfg.get("torch_threads"), cores, workers)
        give = (f"give it its cores ({advice} beside {workers} workers on {cores} cores, fewer "
                "workers, other jobs off the machine)" if advice else
                f"give it its cores (torch already runs {max(1, cores - workers)} thread(s) "
                f"beside {workers} workers on {cores} cores: fewer workers, or other jobs off "
                "the machine)")
        lead = f"the data path keeps up; {first}" if first else "the data path keeps up, but "
        return (f"{lead}the step waited {step_contention:.0%} of its time for a CPU core: "
                f"{give}, then speed up the step itself"), 1.0
    if verdict == "compute-bound":
        return (f"the data path keeps up; {first}{'then ' if first else ''}speed up the step "
                "itself (mixed precision, larger batch, fused kernels)"), 1.0
    if verdict == "unknown":
        return "", None
    share, per_step, per_pass = restarts
    if binding == "startup":
        if per_pass < 2:
            return (f"a new iterator every step (next(iter(loader))) starts the {workers} worker "
                    f"processes again, {share:.0%} of the wait for data: make the iterator once "
                    f"before the loop (it = iter(loader), then next(it) in each step; start it "
                    f"again on StopIteration), or {loader_call(cfg, workers, cuda)}"), (
                step / max(step - per_step, 1e-9))
        return (f"{loader_call(cfg, workers, cuda)}: {share:.0%} of the wait for data is the "
                "first batch of each epoch, while its worker processes start again"), (
            step / max(step - per_step, 1e-9))
    if pb.gil_bound and binding in ("decode", "transform", "collate"):
        w = min(max(workers, 1), cores)
        return (f"thread workers run Python {binding} one at a time under the GIL: use "
                f"processes, Loader(..., worker_type=\"process\", workers={w})"), gain(
            data_time_with(pb, w, cores))
    uneven = uneven_stream(m) if binding in DATA_STAGES else None
    if uneven is not None:
        wid, slow_s, median_s = uneven
        return (f"worker {wid} spent {slow_s:.2f} s preparing its batches against "
                f"{median_s:.2f} s for each of the others: its part of the IterableDataset's "
                "stream (a slow shard, or more records than the others') is the slow one, and "
                "more workers would not split it "
                "(__iter__ decides what each worker reads): split the slow shard into smaller "
                "ones, or deal its records rather than whole shards to the workers "
                "(get_worker_info()), so every worker reads a share of it"), None
    if "num_workers" in cfg and w_rec > workers and binding in DATA_STAGES:
        if binding == "read":
            why = (f"{pb.blocked_fraction:.0%} of each fetch is blocked time (I/O, sleep, locks), "
                   f"so {cores} cores carry up to {io_workers(pb, cores)} workers")
        else:
            why = f"{binding} is CPU work; one worker per core at most"
        call = loader_call(cfg, w_rec, cuda)
        return f"{call}: {why}", gain(data_time_with(pb, w_rec, cores))
    if binding == "device_decode":
        w = max(workers, 1)
        where = "on the device" if cuda else "on one thread"
        return (f"decoding after delivery (decode_on) takes {pb.after * 1e3:.1f} ms per batch "
                f"{where}, inside the loop, where the {w} workers do not share it: decode in the "
                f"workers instead, ahead of the loop, Loader(..., decode_on=\"cpu\")"), gain(
            max((pb.data + pb.after) / w, (pb.cpu + pb.after) / max(cores, 1)))
    if binding == "loop_transform":
        w = max(workers, 1)
        where = (f"Loader(..., transform=...), which its {w} worker(s) run" if feedline else
                 "the dataset's __getitem__ (per sample) or its collate_fn (per batch), which "
                 + (f"its {w} worker(s) run" if workers else
                    f"workers run: {loader_call(cfg, min(cores, 8), cuda)}"))
        return (f"the loop works on each batch for {pb.loop * 1e3:.1f} ms after it arrives, "
                "before the model's forward (augmentation on the training thread), where the "
                f"loader's workers do not share it and the step waits for it: move that work "
                f"into {where}"), gain(
            max((pb.data + pb.after) / w, (pb.cpu + pb.after) / max(cores, 1)))
    if binding == "sampler":
        sampler = cfg.get("batch_sampler") or cfg.get("sampler") or "the sampler"
        return (f"{sampler} takes {pb.after * 1e3:.1f} ms per batch to draw the indices, in the "
                "training process (a sampler never runs in the workers, so more workers cannot "
                "share it): make its __iter__ cheap (draw the whole order at once, at the start "
                "of each epoch, or in set_epoch), and leave per-sample lookups to the dataset's "
                "__getitem__, which the workers run"), gain(
            max(pb.data / max(workers, 1), pb.cpu / max(cores, 1)))
    if binding == "collate":
        if workers and not feedline:  # a DataLoader worker collates the batches it fetches
            return (f"collate takes {pb.collate * 1e3:.1f} ms per batch and already runs in the "
                    f"{workers} worker(s), {cores} cores' worth at most: make the collate function "
                    "cheaper (preallocate, no per-sample Python loop), or do its per-sample part "
                    "once, ahead of training (tokenise or pad the dataset and store it)"), None
        return (f"collate takes {pb.collate * 1e3:.1f} ms per batch: make the collate function "
                "cheaper (preallocate, no per-sample Python loop), or move that work into the "
                "dataset's item code, which workers share"), None
    if binding == "h2d" and cuda:
        if feedline:
            return ("host-to-device copies bind: send fewer bytes (uint8 images, decode or "
                    "augment on the GPU)"), None
        return ("pin host memory and copy with non_blocking=True on a copy stream "
                "(DataLoader(pin_memory=True) and batch.to(device, non_blocking=True), or "
                "feedline.Loader)"), gain(max(pb.data / max(workers, 1), pb.gpu))
    per_draw = step_p50 / max(m.draws_per_step, 1.0)  # the loop takes a batch this often
    if workers > 0 and pb.data / workers < 0.8 * pb.gpu_p50 and pb.fetch_p99 > per_draw:
        # The workers keep up on average; the stall comes from slow batches in the tail.
        depth = prefetch_depth(pb.fetch_p99, per_draw, workers, feedline)
        knob = f"Loader(..., prefetch={depth})" if feedline else (
            f"DataLoader(..., prefetch_factor={depth})")
        return (f"the workers keep up on average but slow batches (p99 {pb.fetch_p99 * 1e3:.0f} "
                f"ms to prepare) stall the step: keep more batches ready, {knob}"), gain(
            max(pb.data / workers, pb.gpu))
    # workers' worth of the data path's own work per typical step: its CPU seconds for a
    # CPU stage (not the time its threads sat queued for a core on a busy host, nor a
    # blocked remainder that is that queueing too), else its blocked time and CPU. More
    # workers than the cores carry cannot help here, so it is more than the cores.
    cpu_work = min(pb.cpu, pb.data_cpu) if pb.data_cpu > 0 else pb.cpu
    work = cpu_work if binding in ("decode", "transform", "collate") and cpu_work > 0 else (
        pb.read + cpu_work)
    typical = min(pb.gpu, pb.gpu_p50) if pb.gpu_p50 > 0 else pb.gpu
    at_least = cores + 1 if verdict == "data-bound" else 1
    need = max(at_least, math.ceil(work / max(typical, 1e-6) - 1e-9))
    tail = "" if feedline else " or use feedline.Loader"
    what = binding if binding in DATA_STAGES else "read+decode"
    return (f"the data path needs {need} workers' worth of {what} on {cores} cores; cut "
            f"per-sample cost: {CUT.get(binding, CUT[''])}{tail}"), None


def _binding(verdict: str, pb: PerBatch, data_time: float) -> str:
    """The stage that binds. ``data_time``: the data path's time per batch as the loop
    sees it (the workers' stages divided among them, plus :attr:`PerBatch.after`)."""
    cands = {"read": pb.read, "decode": pb.decode, "transform": pb.transform,
             "collate": pb.collate, "h2d": pb.h2d}
    if verdict == "unknown":
        return "unknown"
    if verdict != "compute-bound" and pb.after > 0 and pb.after >= max(
            data_time - pb.after, pb.h2d) and not (verdict == "balanced" and pb.gpu >= data_time):
        return pb.after_stage
    if pb.gil_bound or pb.crowded:
        cpu = {k: cands[k] for k in ("decode", "transform", "collate")}
        return max(cpu, key=lambda n: cpu[n])
    if verdict == "compute-bound":
        return "gpu"
    if not pb.measured:
        return "unknown" if verdict == "data-bound" else "gpu"
    if verdict == "balanced" and pb.gpu >= max(data_time, pb.h2d):
        return "gpu"
    return max(cands, key=lambda n: cands[n])


def target_gpu(device: str) -> str:
    """The CUDA device the NUMA rule checks: the loop's, when it names an index, else ``"cuda"``
    (torch's current device when the report is built: the one a torchrun script chose with
    ``torch.cuda.set_device(local_rank)``; before, always ``cuda:0``, so every other rank was
    judged by GPU 0's node)."""
    kind, _, index = device.partition(":")
    return f"cuda:{index}" if kind == "cuda" and index.strip().isdigit() else "cuda"


def _topology_facts(device_type: str, pb: PerBatch, workers: int, device: str = "") -> dict[str, Any]:
    """What the GPU-decode and NUMA rules need: only looked up on a CUDA run."""
    if device_type != "cuda":
        return {}
    from feedline.decode.jpeg_batch import gpu_decoders_available
    from feedline.placement import plan_placement

    libs = gpu_decoders_available()
    now = analyze(pb.read, pb.cpu, pb.h2d, pb.gpu, workers=workers).steady
    then = analyze(pb.read, pb.cpu - pb.decode, pb.h2d, pb.gpu, workers=workers).steady
    return {"gpu_decoder": libs[0] if libs else None, "decode_gain": (now, then),
            "placement": placement_facts(plan_placement(target_gpu(device)))}


def placement_facts(plan: Placement, sysfs: str | os.PathLike[str] = "/sys",
                    allowed: frozenset[int] | None = None) -> dict[str, Any]:
    """``plan`` as a dict, plus where this process (and the workers it starts, which inherit its
    affinity) may run against the GPU node's CPUs: ``process_on_node`` (confined to the node:
    numactl --cpunodebind, taskset, a cpuset) and ``process_off_node`` (no CPU on the node)."""
    from feedline import topology

    out = plan.to_dict()
    node_set = topology.node_cpus(plan.node, sysfs) if plan.node is not None else None
    if node_set:
        mine = allowed if allowed is not None else frozenset(os.sched_getaffinity(0))
        out.update(process_cpus=sorted(mine), node_cpus=sorted(node_set), process_on_node=mine <= node_set,
                   process_off_node=not mine & node_set)
    return out


def _stage_table(m: Measurements, wait: list[float], body: list[float],
                 gpu: list[float]) -> dict[str, StageStats]:
    """Every stage seen, known or not (a ``checkpoint`` stage gets its own line)."""
    by: dict[str, list[float]] = {}
    for s in m.spans:
        if s.stage not in ("wait", "step"):
            by.setdefault(s.stage, []).append(s.duration)
    if m.copy_times:
        by["h2d"] = list(m.copy_times)
    stages = {k: summarize(v) for k, v in by.items()}
    stages["wait"] = summarize(wait)
    stages["step"] = summarize(body)
    if m.device_type == "cuda":
        stages["gpu"] = summarize(gpu)
    return stages


def build_report(m: Measurements) -> Report:
    """Summarise, analyse and judge the training loader's run. See the module docstring."""
    k = m.warmup if len(m.wait) > m.warmup else 0
    wait, body = m.wait[k:], m.body[k:]
    iters = [a + b for a, b in zip(wait, body, strict=True)]
    gpu_k = m.gpu[k:]
    if m.device_type == "cuda" and len(gpu_k) == len(iters):
        # The host may run ahead of the device (no sync in the loop): a step then lasts
        # as long as its device work, not the host's enqueue time.
        iters = [max(t, g) for t, g in zip(iters, gpu_k, strict=True)]
    step = summarize(iters) if iters else EMPTY_STATS
    # A blocking host-to-device copy inside the step is a data stall too: the device waits.
    # With loader workers, time the training thread spent queued for a CPU core while it
    # waited is host contention, not data. In-process loading (num_workers=0, a plain
    # generator) does the data work on this thread, so its queueing is data time.
    in_workers = int(m.loader.get("num_workers") or 0) > 0
    # The first pass's first batch from each worker waits for that worker's start (a
    # spawned worker imports torch and the script, a worker_init_fn opens a connection):
    # warm-up like the first step's, not a stall of the loop, when enough steps remain.
    s0 = max(0, math.ceil(int(m.loader.get("num_workers") or 0) / max(m.draws_per_step, 1.0)) - k)
    s0 = s0 if len(iters) >= 4 * (s0 + 1) else 0
    runq = sum(m.wait_runq[k + s0:len(m.wait)]) if in_workers else 0.0
    stall_s = sum(wait[s0:]) - runq + m.blocking_copy_s * (len(iters) / max(len(m.wait), 1))
    # the loop's own work on each batch before the model's forward (augmentation on the
    # training thread) is inside the step body, but it is data work: the step stalls on it
    t_from = m.step_starts[k + s0] if k + s0 < len(m.step_starts) else float("-inf")
    # a sampled span (``every``: it stands for that many batches; see _torch_hooks.ARM_EVERY)
    # counts for the steps those batches make
    loop_s = sum(s.duration * (float(s.attrs["every"]) / max(m.draws_per_step, 1.0)
                               if s.attrs.get("every") else 1.0)
                 for s in m.spans if s.stage == "loop_transform" and s.start >= t_from)
    # the share of the stall that later passes' worker restarts take is of every wait (and
    # of the loop's own batch work)
    restart_base = (stall_s + loop_s + sum(wait[:s0])
                    - (sum(m.wait_runq[k:k + s0]) if in_workers else 0.0))
    stall_s += loop_s
    total, stall_total = sum(iters), sum(iters[s0:])
    stall = min(1.0, max(0.0, stall_s) / stall_total) if stall_total > 0 else 0.0
    pb = _per_batch(m, len(m.wait))
    workers = worker_processes(m.loader)
    data_time = pb.data / max(workers, 1) + pb.after
    reason = fix = ""
    if not iters:
        verdict = "unknown"
        reason = (f"only {len(m.wait)} step(s) measured: the first one (worker start-up) is "
                  "warm-up, so nothing is left to judge")
        fix = "measure more steps (--steps 20 or more), or a longer run"
    else:
        verdict = _verdict(stall, max(data_time, pb.h2d), pb.gpu, m.ab)
    # A step's run-queue reading spans its whole interval between two waits; its body can
    # be shorter (another loader's pass, an epoch's end taken out): a step waited at most
    # its body for a core, so the share never passes 100%.
    queued_body = [min(q, b) for q, b in zip(m.body_runq[k:len(m.body)], body, strict=False)]
    step_contention = (sum(queued_body) / max(sum(body[:len(queued_body)]), 1e-12)
                       if queued_body else 0.0)
    # Thread workers that keep a core busy and leave the training thread queued for one
    # inside its step: the step is slower by the data path's work, whatever the wait says.
    # ... but only when their CPU per batch, over the cores they keep busy, is a data
    # stall's share of the step (a little decode beside a long step does not bind)
    width = 1.0 if pb.gil_bound else max(1.0, min(pb.gil_share, pb.threads, m.cores))
    hidden = pb.data_cpu / width / step.mean if step.mean > 0 else 0.0
    pb.crowded = (pb.threads > 0 and not pb.gil_bound and step_contention >= STEP_CONTENTION
                  and pb.gil_share >= 0.5 and hidden >= DATA_BOUND_STALL)
    if (pb.gil_bound or pb.crowded) and verdict != "unknown":
        # The workers' Python holds the GIL (or the cores) most of the time: the training
        # thread waits for it inside its own step, so the data path costs more than the
        # wait shows: at least its CPU per batch, one thread at a time under the GIL (or
        # spread over the cores the threads were seen to keep busy), of each step.
        verdict = "data-bound"
        stall = max(stall, min(1.0, hidden))
        if pb.gil_bound:
            reason = (f"thread workers running Python hold the GIL (a thread waking up waits "
                      f"{pb.gil_wait * 1e3:.1f} ms for it): the training thread waits for it "
                      "inside its step too, so part of the step is data time")
        else:  # processes would take the same cores: the data path's CPU is the cost
            reason = (f"the {pb.threads} thread workers in the training process keep "
                      f"{pb.gil_share:.1f} cores busy with {pb.data_cpu * 1e3:.0f} ms of CPU per "
                      f"batch, and the training thread waited {step_contention:.0%} of its step "
                      "for a core: part of the step is data time")
        fix = ("use process workers (the recommendation says how)" if pb.gil_bound else
               "cut the data path's CPU per batch (the recommendation says where)")
    binding = _binding(verdict, pb, data_time)
    if binding == "unknown" and not reason:
        reason = ("the loader's stages were not seen (not a torch DataLoader or feedline.Loader, "
                  "or its workers were not hooked), so only the wait for data is known")
        fix = ("time the stages yourself with feedline.spans.span('read') etc. inside the "
               "dataset, or use feedline.Loader, whose stages report themselves")
    util = min(1.0, pb.gpu * len(iters) / total) if total > 0 else None
    an = analyze(pb.read, pb.cpu, pb.h2d, pb.gpu, workers=max(workers, 1))
    serial_loader = ("num_workers" in m.loader and workers == 0) or not pb.measured
    # With workers, taking even a ready batch costs the loop something (a process worker's
    # batch crosses a queue and is unpickled): the floor of the waits, paid once per step.
    floor = m.draw_waits[k:] or m.draw_waits or wait  # a step of several draws pays it each
    receive = 0.0 if serial_loader or not wait else min(floor) * (
        m.draws_per_step if m.draw_waits else 1.0)
    # the loop's own work on each batch (loop_transform) runs in series with the step
    predicted = (an.serial if serial_loader else an.steady + receive) + pb.loop
    analysis = an.to_dict() | {
        "predicted": predicted, "measured": step.mean,
        "error": (predicted - step.mean) / step.mean if step.mean > 0 else None,
        "applies": "serial" if serial_loader else "steady", "receive": receive,
        "stages_measured": pb.measured, "blocked_fraction": pb.blocked_fraction,
        "per_batch": {"read": pb.read, "decode": pb.decode, "transform": pb.transform,
                      "collate": pb.collate, "h2d": pb.h2d, "gpu": pb.gpu}
        | ({"loop_transform": pb.loop} if pb.loop > 0 else {}),
        "gil_bound": pb.gil_bound, "gil_wait": pb.gil_wait, "fetch_p99": pb.fetch_p99,
        "data_cpu": pb.data_cpu, "step_contention": step_contention,
        "quiet_s": m.quiet, "uneven_worker": uneven_stream(m),
    }
    queued = m.wait_runq[k:len(m.wait)] if in_workers else []
    queued = queued + [0.0] * max(0, len(wait) - len(queued))
    # The first wait of each later epoch (a DataLoader starting its workers again) is its
    # own finding; the tail of the other waits is what prefetching can hide. Each restarted
    # worker's first batch waits for that worker's start, so a pass's first ``workers``
    # waits are start-up, not the tail.
    opens = {i - k for i in m.pass_first if i >= k}
    started = {i + j for i in opens for j in range(max(workers, 1))}
    waits_q = [max(0.0, a - b) for a, b in zip(wait, queued, strict=False)]
    data_wait = summarize(x for i, x in enumerate(waits_q) if i not in started)
    restart = [x for i, x in enumerate(waits_q) if i in opens]
    pass_stalls = _pass_stalls(waits_q, iters, sorted(opens))
    if len(pass_stalls) > 1:
        analysis["pass_stalls"] = pass_stalls
    w_rec = workers_for(pb, m.cores, m.gpus)
    after_start = [x for i, x in enumerate(waits_q) if i in started]
    restart_s = sum(after_start) - len(after_start) * data_wait.p50  # beyond ordinary waits
    per_pass = len(iters) / (len(restart) + 1)
    restarts = ((restart_s / restart_base, restart_s / len(iters), per_pass)
                if iters and stall_s > 0 and restart_base > 0
                else (0.0, 0.0, per_pass))
    if (verdict == "data-bound" and restarts[0] > 0.5 and workers > 0 and not pb.gil_bound
            and not m.loader.get("feedline") and (not m.loader.get("persistent_workers")
                                                   or int(m.loader.get("instances") or 1) > 1)):
        binding = "startup"  # worker start-up at each new iterator is most of the stall
    # a step's own time: a body that waited for a CPU core (a busy host) is not long work
    queued_all = list(queued_body) + [0.0] * max(0, len(body) - len(queued_body))
    long = long_steps([max(0.0, b - q) for b, q in zip(body, queued_all, strict=False)], total)
    rec, gain = _recommend(m, pb, verdict, binding, step.mean, w_rec, step.p50, restarts,
                           step_contention, long)
    facts = RunFacts(
        device_type=m.device_type, verdict=verdict, stall_fraction=stall,
        gpu_utilisation=util, step_p50=step.p50, wait_p50=data_wait.p50, wait_p99=data_wait.p99,
        loader=m.loader, copies=m.copies, batch_bytes=m.batch_bytes, cores=m.cores,
        gpus=m.gpus, shm_free=m.shm_free, pinned_series=m.pinned_series, workers_rec=w_rec,
        blocked_fraction=pb.blocked_fraction, io_workers=io_workers(pb, m.cores),
        fetch_p99=pb.fetch_p99, gil_bound=pb.gil_bound, binding=binding,
        epoch_start_wait=sorted(restart)[len(restart) // 2] if restart else 0.0,
        epoch_starts=len(restart), steps_per_pass=per_pass, pass_stalls=pass_stalls,
        quiet=m.quiet, measured=total, body_p50=summarize(body).p50 if body else 0.0,
        long=long,
        **_topology_facts(m.device_type, pb, max(workers, 1), m.device),
    )
    facts.contention = runq / total if total > 0 else 0.0
    facts.step_contention = step_contention
    findings = detect(facts)
    if handoff(facts):
        gain = None  # the step that the data path would be hidden behind was not seen
    starts = m.step_starts[k:]
    return Report(
        name=m.name, device=m.device_type, steps=len(iters),
        stages=_stage_table(m, wait, body, m.gpu[k:]), step_time=step,
        stall_fraction=stall,
        samples_per_s=(m.batch_samples * m.draws_per_step / step.mean)
        if m.batch_samples and step.mean else None,
        gpu_utilisation=util, verdict=verdict, binding=binding, analysis=analysis,
        findings=findings, predicted_gain=gain, recommendation=rec,
        host=m.host | {"wait_cpu_queue_fraction": round(facts.contention, 4)},
        loader=m.loader, copies=m.copies, ab=m.ab,
        timeline=[[t, a, b] for t, a, b in zip(starts, wait, body, strict=False)],
        spans=m.spans + m.extra_spans, loaders=m.loaders_other, reason=reason, fix=fix,
    )


def _pass_stalls(waits: list[float], iters: list[float], opens: list[int]) -> list[float]:
    """Share of each pass's (epoch's) time spent waiting for data, in order; passes of
    fewer than 3 measured steps (a ``next(iter(loader))`` per step) are not told apart."""
    bounds = [0, *[i for i in opens if 0 < i < len(iters)], len(iters)]
    cuts = [(a, b) for a, b in itertools.pairwise(bounds) if b > a]
    if len(cuts) < 2 or min(b - a for a, b in cuts) < 3:
        return []
    return [min(1.0, sum(waits[a:b]) / max(sum(iters[a:b]), 1e-12)) for a, b in cuts]


def other_loader(label: str, config: dict[str, Any], waits: list[float], bodies: list[float],
                 passes: list[tuple[float, float]], spans: list[Span], wall: float,
                 cores: int, cuda: bool, lockstep_with: str | None = None) -> dict[str, Any]:
    """One line for a loader that is not the training one (validation, say).

    Its share of the run's wall time, its own wait for data and stages, and its
    own advice, from its own stages as for the training loader (the binding
    stage and what it calls for) when it mostly waits for data, else "this time
    is the loop body run on its batches" (evaluation compute).

    ``lockstep_with``: the training loader's label when this one is stepped in
    lockstep with it (``zip``, tasks taken in turn): training data too (role
    ``"lockstep"``), whose waits the verdict already counts, not evaluation.
    """
    active = sum(b - a for a, b in passes)
    wait_s = sum(waits)
    steady = waits[1:] or waits  # the first wait starts its workers: warm-up, as for training
    stall = wait_s / active if active > 0 else 0.0
    stages: dict[str, list[float]] = {}
    for s in spans:
        stages.setdefault(s.stage, []).append(s.duration)
    binding, gain = "", None
    if stall >= DATA_BOUND_STALL:
        binding, advice, gain = _other_advice(config, waits, bodies, spans, cores, cuda)
        advice = f"it waits for data {stall:.0%} of its time: {advice}"
    elif lockstep_with:
        advice = "it keeps up: nothing to change in it"
    else:
        advice = ("its time is the loop body on its batches (evaluation compute): run it less "
                  "often or on fewer batches if its share is too high")
    if lockstep_with:
        advice = (f"training data stepped in lockstep with {lockstep_with} (the same steps, "
                  f"whose waits for it the verdict counts); {advice}")
    return {
        "label": label, "role": "lockstep" if lockstep_with else "other", "config": config,
        "steps": len(waits),
        "passes": len(passes), "active_s": active, "share_of_wall": active / wall if wall else 0.0,
        "wait": summarize(steady).to_dict(), "body": summarize(bodies).to_dict(),
        "stall_fraction": stall, "binding": binding, "predicted_gain": gain,
        "stages": {k: summarize(v).to_dict() for k, v in stages.items()}, "advice": advice,
    }


def _other_advice(config: dict[str, Any], waits: list[float], bodies: list[float],
                  spans: list[Span], cores: int, cuda: bool) -> tuple[str, str, float | None]:
    """(binding stage, advice, predicted gain) of a loader that mostly waits for data,
    from its own stages, with the training loader's rules."""
    m = Measurements(name="other", device_type="cuda" if cuda else "cpu", wait=waits,
                     body=bodies, gpu=bodies, spans=spans, loader=config, cores=cores)
    workers = int(config.get("num_workers") or 0)
    pb = _per_batch(m, len(waits))
    binding = _binding("data-bound", pb, pb.data / max(workers, 1) + pb.after)
    if binding == "unknown":  # its stages were not seen: all that is known is the wait
        w = max(workers + 1, min(recommended_workers(cores, 1), 8))
        return binding, loader_call(config, w, cuda), None
    k = 1 if len(waits) > 1 else 0
    step = summarize(a + b for a, b in zip(waits[k:], bodies[k:], strict=False))
    rec, gain = _recommend(m, pb, "data-bound", binding, step.mean, workers_for(pb, cores, 1),
                           step.p50)
    return binding, f"{binding} binds; {rec}", gain
