"""The measuring engine shared by :func:`feedline.watch` and ``feedline diagnose``.

A :class:`Session` composes three parts and owns their lifetimes:

* the **step clocks** (:class:`~feedline.observe._clock.StepClocks`): one clock
  per loader, fed by every ``next()`` on any thread;
* the **collectors**: the span recorder (``feedline.spans`` sink), the torch
  hooks (:class:`~feedline.observe._torch_hooks.TorchHooks`: DataLoader
  iteration, fetch/collate timing in the consumer and in workers of any start
  method, host-to-device copies), feedline.Loader's published step hook, and
  the host sampler;
* the **replay** (:class:`~feedline.observe._replay.Replay`), only when asked
  and only after the measured steps of a run limited to ``steps``.

Between :meth:`start` and :meth:`stop` nothing but appends happens on the
user's threads; :meth:`report` does all the arithmetic once.
"""

from __future__ import annotations

import bisect
import itertools
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Collection
from contextlib import ExitStack
from typing import Any, NoReturn

from feedline import spans
from feedline.children import KEPT_STAGES, SinceLast
from feedline.observe._clock import (
    LoaderClock,
    StepClocks,
    StepsView,
    batch_info,
    fold_waits,
    group_draws,
    loader_config,
    lockstep,
)
from feedline.observe._host import HostSampler, cuda_ordinal
from feedline.observe._replay import Replay
from feedline.observe._stats import Recorder, Span
from feedline.observe._timing import DeviceTimer, device_type, make_timer
from feedline.observe._torch_hooks import (
    CopyLog,
    HookTargets,
    TorchHooks,
    read_worker_spans,
    sched_times,
)
from feedline.observe.findings import shm_free_bytes
from feedline.observe.report import Measurements, Report, build_report, other_loader

__all__ = ["Session", "batch_info", "loader_config"]


class Session:
    """Measures one run. Call :meth:`start`, let the loaders run, then :meth:`report`.

    Args:
        name: label of the run in reports.
        device: where the loop body runs (``"cpu"``, ``"cuda:0"``, a torch.device).
        batch_size: samples per batch for throughput (inferred from the batch if None).
        steps: the run ends once the training loader has taken this many steps (a loader
            run inside another loader's pass does not count; see :class:`StepClocks`).
        ab: the synthetic-batch check after the measured steps (needs ``steps``).
        replay: steps of the synthetic-batch check (>= 2).
        host_interval: seconds between host samples.
        on_end: called when the run reaches ``steps`` (after the replay); should
            end the run (raise). Without it ``next()`` raises StopIteration.

    Raises:
        ValueError: bad ``steps``, ``replay`` or ``batch_size``, or ``ab`` without ``steps``.
    """

    def __init__(self, name: str = "run", device: Any = "cpu", batch_size: int | None = None,
                 *, steps: int | None = None, ab: bool = False, replay: int = 10,
                 host_interval: float = 0.5, on_end: Callable[[], Any] | None = None) -> None:
        if steps is not None and steps < 1:
            raise ValueError(f"steps must be >= 1 or None, got {steps!r}")
        if replay < 2:
            raise ValueError(f"replay must be >= 2, got {replay!r}")
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be >= 1 or None, got {batch_size!r}")
        if ab and steps is None:
            raise ValueError("ab=True needs steps=N: the synthetic-batch check runs after the "
                             "N measured steps, where the run ends anyway")
        self.name, self.device, self.device_type = name, device, device_type(device)
        self.batch_size, self.steps = batch_size, steps
        self.recorder = Recorder()
        self.copy_log = CopyLog()
        cuda = self.device_type == "cuda"
        self.sampler = HostSampler(host_interval, cuda_ordinal(device) if cuda else None,
                                   self._sample_pinned if cuda else None)
        self.replay = Replay(replay, self.device_type) if ab else None
        self.clocks = StepClocks(self._new_timer, lambda: sched_times()[1], steps, self._limit)
        self.hooks: TorchHooks | None = None
        self.notes: list[str] = []
        self.pinned: list[float] = []
        self._pinned_off = False
        self.on_end = on_end
        self.on_fork: Callable[[], None] | None = None
        """Set before :meth:`start`: called once in a process forked from this one at its
        first ``iter(DataLoader)`` (see :class:`HookTargets`)."""
        self._stack = ExitStack()
        self._worker_dir: str | None = None
        self._t0: float | None = None
        self._t_end: float | None = None
        self._limit_at: float | None = None

    # ------------------------------------------------------------ lifecycle
    def start(self) -> Session:
        """Install the collectors (torch hooks only when torch is loaded); idempotent."""
        if self._t0 is not None:
            return self
        self._t0 = time.perf_counter()
        stack = self._stack
        sink = _LoaderSink(self.recorder, self.clocks,
                           lambda: self.hooks.worker_pids if self.hooks is not None else ())
        spans.install(sink)
        stack.callback(spans.uninstall, sink)
        spans.install_step_hook(self.clocks.on_next)
        stack.callback(spans.uninstall_step_hook, self.clocks.on_next)
        self.sampler.start()
        stack.callback(self._stop_sampler)
        if "torch" in sys.modules:
            self._install_torch()
        return self

    def attach_torch(self, device: Any = None) -> None:
        """torch was imported after :meth:`start`: install the torch hooks now (nothing
        to do when they are, or the session is not running). ``device``, when given, is
        where the loop runs, known only now (``"auto"`` asks torch whether there is a
        GPU); only before any loader step, since nothing measured so far used it.

        ``feedline diagnose`` starts its session before the script runs and calls this
        when the script imports torch, so a process that never does (a launcher, a
        shell's ``python export.py``) is not made to import it.
        """
        if self._t0 is None or self._t_end is not None or self.hooks is not None:
            return
        if device is not None and device != self.device and not self.clocks.clocks:
            self._use_device(device)
        self._install_torch()

    def _use_device(self, device: Any) -> None:
        """Measure on ``device`` from now on (before any step): its host sampler (a GPU's
        NVML signals) and replay go with it."""
        self.device, self.device_type = device, device_type(device)
        cuda = self.device_type == "cuda"
        running = self._t0 is not None and self._t_end is None
        if running:
            self.sampler.stop()
        self.sampler = HostSampler(self.sampler.interval, cuda_ordinal(device) if cuda else None,
                                   self._sample_pinned if cuda else None)
        if running:
            self.sampler.start()
        if self.replay is not None:
            self.replay = Replay(self.replay.n, self.device_type)

    def _install_torch(self) -> None:
        self._worker_dir = tempfile.mkdtemp(prefix="feedline-workers-")
        self.hooks = TorchHooks(HookTargets(
            self.recorder, self.copy_log, self.clocks.on_next, self.clocks.on_iter,
            self.clocks.label, self.clocks.current, self._worker_dir,
            self.on_fork, self.clocks.on_optimizer_step, self.clocks.on_backward,
            self.clocks.owner, self.clocks.on_teardown))
        self._stack.enter_context(self.hooks.installed())
        self.clocks.delivered = self.hooks.delivered
        self._stack.callback(setattr, self.clocks, "delivered", None)

    def _stop_sampler(self) -> None:
        self.sampler.stop()

    def stop(self) -> None:
        """Remove every hook, collect worker spans (idempotent)."""
        if self._t0 is None or self._t_end is not None:
            return
        self._t_end = time.perf_counter()
        self.clocks.close()
        if self.replay is not None:
            self.replay.stop()
        self._stack.close()
        if self._worker_dir is not None:
            self.recorder.add(read_worker_spans(self._worker_dir))
            shutil.rmtree(self._worker_dir, ignore_errors=True)

    def _new_timer(self) -> DeviceTimer | None:
        return make_timer(self.device) if self.device_type == "cuda" else None

    # -------------------------------------------------------------- stepping
    def next(self, owner: Any, fetch: Callable[[], Any]) -> Any:
        """One ``next()`` of ``owner`` (``fetch()`` gets the batch); starts the session."""
        if self._t0 is None:
            self.start()
        return self.clocks.on_next(owner, fetch)

    def step_done(self, owner: Any) -> None:
        """End the current step of ``owner`` now (optional explicit boundary)."""
        self.clocks.step_done(owner)

    def _limit(self, clock: LoaderClock) -> Any:
        if self._limit_at is None:
            self._limit_at = time.perf_counter()
        if self.replay is not None:
            return self.replay.next(clock, self.hooks, self._end)
        self._end()

    def _end(self) -> NoReturn:
        if self.on_end is not None:
            self.on_end()
        raise StopIteration

    def _sample_pinned(self) -> None:
        import torch

        read = getattr(torch.cuda, "host_memory_stats", None)
        if self._pinned_off:
            return
        try:
            stats = read() if read is not None else {}
        except RuntimeError as e:
            self.notes.append(f"pinned memory not sampled: {e}")
            self._pinned_off = True
            return
        key = next((k for k in stats if "allocated_bytes" in k and "current" in k), None)
        if key is not None:
            self.pinned.append(float(stats[key]))

    # ------------------------------------------------------------- reporting
    def _spans(self, final: bool = True) -> list[Span]:
        """Every span so far, each filed under its loader's label (``loader``), with the
        Loader's copy-stream events turned into the copy's device time."""
        out: list[Span] = []
        recorded = self.recorder.spans()
        if not final and self._worker_dir is not None and self._t_end is None:
            recorded += read_worker_spans(self._worker_dir)
        labels = self.clocks.labels()
        for s in recorded:
            ev, owner = s.attrs.get("events"), s.attrs.get("owner")
            if ev is None and owner is None:
                out.append(s)
                continue
            attrs = {k: v for k, v in s.attrs.items() if k not in ("events", "owner")}
            if owner in labels:
                attrs["loader"] = labels[owner]
            out.append(_device_timed(Span(s.stage, s.start, s.end, s.pid, s.tid, attrs), ev, final))
        return out

    def measurements(self, final: bool = True) -> tuple[Measurements | None, list[dict[str, Any]]]:
        """The training loader's measurements and a summary of every other loader.

        ``final=False`` (a partial report while running) never waits on the device
        and reads worker spans from their files without removing them.
        """
        end = self._t_end if self._t_end is not None else time.perf_counter()
        if self._limit_at is not None:
            end = min(end, self._limit_at)
        clocks = sorted(self.clocks.clocks.values(), key=lambda c: c.order)
        train = self.clocks.training()
        by_time = train is not None and self.clocks.chosen_for_time(train)
        # Loaders zipped with the training loader (or taken in turn with it) are one data
        # path: the step is the one that waits most, and it waits for all of them (their
        # waits fold into its own). One iterated under no_grad only, beside a training
        # loader that is not, is evaluation.
        zipped = [c for c in clocks if train is not None and c is not train
                  and (c.grad or not train.grad) and lockstep(train, c)]
        if zipped and train is not None and self.clocks.primary is None:
            group = [train, *zipped]
            train = _waits_most(train, group)
            zipped = [c for c in group if c is not train]
            by_time = False
        group_ids = {id(c) for c in zipped} | {id(train)} if zipped else set()
        all_spans = self._spans(final)
        passes = {c.label: c.steps_view(end, [], final).passes for c in clocks}
        views: dict[str, StepsView] = {}
        for c in clocks:
            others = [(tid, a, b) for o in clocks if o is not c for tid in o.tids
                      for a, b in passes[o.label]
                      if not (id(c) in group_ids and id(o) in group_ids)]
            views[c.label] = c.steps_view(end, others, final)
        if train is not None and zipped:
            views[train.label] = fold_waits(views[train.label], [views[c.label] for c in zipped])
        firsts: list[int] = []
        n_draws, draw_waits = 1, []
        if train is not None:  # several draws between two updates: one step
            n_draws, draw_waits = len(views[train.label].starts), views[train.label].waits
            views[train.label], firsts = group_draws(views[train.label],
                                                     self.clocks.updates_of(train))
        # the measured span: from the first loader activity (not the script's start-up)
        first = min((t for c in clocks for t in c.pass_starts[:1] + c.starts[:1]),
                    default=self._t0 or end)
        wall = max(end - first, 1e-9)
        loop = self._loop_spans(clocks, views, train)
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        cuda = self.device_type == "cuda"
        others_out = [other_loader(c.label, c.config, views[c.label].waits,
                                   views[c.label].bodies, views[c.label].passes,
                                   _of(all_spans, c.label), wall, cores, cuda,
                                   train.label if train is not None and any(c is z for z in zipped) else None)
                      for c in clocks if c is not train]
        if train is None:
            return None, others_out
        v = views[train.label]
        draws = n_draws / max(len(v.starts), 1)
        body_runq = train.body_runq()
        if draws > 1:
            body_runq = [sum(body_runq[a:b]) for a, b in itertools.pairwise(firsts)]
        copies = self.copy_log.durations(wait=final)
        cut = self._limit_at if self._limit_at is not None else float("inf")
        recs = [(r, d) for r, d in zip(self.copy_log.records, copies, strict=False) if r.start < cut]
        m = Measurements(
            name=self.name, device_type=self.device_type, device=_device_text(self.device),
            wait=v.waits, body=v.bodies,
            gpu=v.gpu[:len(v.waits)] if v.gpu else list(v.bodies),
            spans=[s for s in all_spans + loop if s.attrs.get("loader") in (None, train.label)],
            extra_spans=[s for s in all_spans + loop
                         if s.attrs.get("loader") not in (None, train.label)],
            step_starts=v.starts, wait_runq=v.runq, body_runq=body_runq, copy_times=[d for _, d in recs],
            blocking_copy_s=sum(d for r, d in recs if not (r.pinned and r.non_blocking)),
            copies=self.copy_log.summary(),
            loader=dict(train.config) | {"label": train.label, "consumer": (
                "main" if threading.main_thread().ident in train.tids else "thread")}
            | ({"zipped_with": [c.label for c in zipped]} if zipped else {})
            | ({"chosen_for": "time"} if by_time else {})
            | ({"draws_per_step": round(draws, 2)} if draws > 1 else {})
            | dropped(_of(all_spans, train.label), self.clocks.owners_of(train),
                      self.batch_size or train.batch_samples)
            | queue(_of(all_spans, train.label)),
            batch_samples=self.batch_size or train.batch_samples, batch_bytes=train.batch_bytes,
            host=self.sampler.summary(_measured_window(v.starts, end)), pinned_series=list(self.pinned),
            cores=cores, gpus=_gpu_count(self.device_type), shm_free=shm_free_bytes(),
            wall=wall, loaders_other=others_out,
            quiet=max(0.0, end - max((c.starts[-1] + c.waits[-1] for c in clocks if c.waits),
                                     default=end)),
            pass_first=_pass_first(v.starts, train.pass_starts), draws_per_step=draws,
            draw_waits=draw_waits if draws > 1 else [],
        )
        if self.replay is not None and self.replay.clock is train:
            m.ab = _ab(v, self.replay.steps(), m.warmup)
        return m, others_out

    def _loop_spans(self, clocks: list[LoaderClock], views: dict[str, StepsView],
                    train: LoaderClock | None) -> list[Span]:
        """``wait`` and ``step`` spans of every loader (named with the loader when not training)."""
        pid, out = os.getpid(), []
        for c in clocks:
            v, tid = views[c.label], min(c.tids) if c.tids else 0
            suffix = "" if c is train else f" [{c.label}]"
            for i, (t0, w, b) in enumerate(zip(v.starts, v.waits, v.bodies, strict=False)):
                out.append(Span("wait" + suffix, t0, t0 + w, pid, tid, {"step": i, "loader": c.label}))
                out.append(Span("step" + suffix, t0 + w, t0 + w + b, pid, tid,
                                {"step": i, "loader": c.label}))
        return out

    def partial_report(self) -> Report:
        """The report of the steps so far, without stopping (for a run that may be killed)."""
        return self._build(final=False)

    def report(self) -> Report:
        """Stop (if still running) and build the :class:`Report`."""
        self.stop()
        return self._build(final=True)

    def _build(self, final: bool) -> Report:
        m, others = self.measurements(final)
        if m is None and not self.clocks.clocks:
            rep = Report.unknown(
                self.name, self.device_type,
                "no training step was measured: no DataLoader or feedline.Loader was iterated, "
                "so the loop takes its batches from its own code (a generator, an environment "
                "or replay buffer, a queue), whose steps diagnose cannot see",
                "wrap what the loop iterates: `for batch in feedline.watch(batches): ...` "
                "(any iterable; make one of a `while` loop's draws with a generator)",
                loaders=others)
        elif m is None:
            rep = Report.unknown(
                self.name, self.device_type,
                "no training step was measured: a loader was iterated but yielded no batch "
                "(an empty dataset, or a sampler with nothing to draw)",
                "check that the loader yields batches, or wrap the consumer side: "
                "`for batch in feedline.watch(loader): ...`", loaders=others)
        else:
            rep = build_report(m)
        if self.notes:
            rep.host = rep.host | {"notes": list(self.notes)}
        return rep


class _LoaderSink:
    """The span sink of a session: files a span emitted on a thread that is inside a
    loader's ``next()`` (a loader's consumer side) under that loader; spans of threads
    bound to a loader (:func:`feedline.spans.bind`) carry their ``owner`` already."""

    def __init__(self, recorder: Recorder, clocks: StepClocks,
                 skip: Callable[[], Collection[int]] = frozenset) -> None:
        self.recorder, self.clocks = recorder, clocks
        self._kids = SinceLast(skip=skip)

    def record(self, stage: str, start: float, end: float, attrs: dict[str, Any]) -> None:
        if "owner" not in attrs and "loader" not in attrs:
            label = self.clocks.current()
            if label is not None:
                attrs["loader"] = label
        if (stage in KEPT_STAGES and "cpu" in attrs and "child_cpu" not in attrs
                and attrs.get("worker") == threading.current_thread().name):
            # a thread worker's span: a decoder process it keeps ran while it waited
            kids = self._kids()
            if kids > 0:
                attrs["child_cpu"] = kids
        self.recorder.record(stage, start, end, attrs)


def _device_timed(s: Span, events: Any, final: bool) -> Span:
    """``s`` lasting its copy's device time, from the Loader's copy-stream ``events``
    (a partial report does not wait for a copy still running)."""
    if events is None:
        return s
    try:
        if not final and not events[1].query():
            return s
        events[1].synchronize()
        dur = events[0].elapsed_time(events[1]) / 1000.0
    except RuntimeError:
        return s
    return Span(s.stage, s.start, s.start + dur, s.pid, s.tid, s.attrs | {"host_s": s.duration})


def dropped(spans: list[Span], owners: list[Any], batch: int | None) -> dict[str, Any]:
    """``{"dropped": ...}``: samples the loader read and did not deliver (its collate
    spans' ``dropped``; a feedline.Loader's ``stats["skipped"]``), or ``{}``."""
    skipped = delivered = 0
    for o in owners:
        counters = getattr(o, "stats", None) if hasattr(o, "on_error") else None
        if isinstance(counters, dict):
            skipped += int(counters.get("skipped") or 0)
            delivered += int(counters.get("batches") or 0) * int(getattr(o, "batch_size", 0) or 0)
    if skipped:
        return {"dropped": {"samples": skipped, "given": delivered + skipped,
                            "by": "on_error='skip'"}}
    collates = [x for x in spans if x.stage == "collate"]
    marked = [x for x in collates if x.attrs.get("dropped")]
    if not marked:
        return {}
    n = sum(int(x.attrs["dropped"]) for x in marked)
    given = sum(int(x.attrs.get("given") or 0) for x in marked) + (len(collates) - len(marked)) * (batch or 0)
    empty = sum(1 for x in marked if x.attrs["dropped"] == x.attrs.get("given"))
    return {"dropped": {"samples": n, "given": given, "empty_batches": empty, "by": "collate_fn"}}


def queue(spans: list[Span]) -> dict[str, Any]:
    """``{"queue": ...}``: how full a feedline.Loader's window was when the loop asked for a
    batch (its ``wait`` spans' ``ready`` of ``window``) and its producers' waits on the pinned
    budget (``budget_wait`` spans), as ``loader.stats`` counts them; ``{}`` for other loaders."""
    waits = [x for x in spans if x.stage == "wait" and int(x.attrs.get("window") or 0) > 0
             and "ready" in x.attrs]
    budget = [x for x in spans if x.stage == "budget_wait"]
    if not waits and not budget:
        return {}
    fill = [min(int(x.attrs["ready"]), int(x.attrs["window"])) / int(x.attrs["window"]) for x in waits]
    return {"queue": {"occupancy": round(sum(fill) / len(fill), 3) if fill else None,
                      "batches": len(waits), "starved_batches": sum(1 for f in fill if f == 0),
                      "budget_waits": len(budget),
                      "budget_wait_s": round(sum(x.duration for x in budget), 6)}}


def _of(all_spans: list[Span], label: str) -> list[Span]:
    return [s for s in all_spans if s.attrs.get("loader") == label]


def _ab(v: StepsView, replayed: list[float], warmup: int) -> dict[str, Any] | None:
    """Mean step time with the data path (measured steps) vs without (replayed steps).

    The mean, as the headline step time, so the two figures can be compared.
    """
    k = warmup if len(v.waits) > warmup else 0
    real = [a + b for a, b in zip(v.waits[k:], v.bodies[k:], strict=False)]
    if not real or not replayed:
        return None
    with_data, without = sum(real) / len(real), sum(replayed) / len(replayed)
    return {"steps": len(replayed), "statistic": "mean", "with_data_path": with_data,
            "without_data_path": without,
            "ratio": with_data / without if without > 0 else None}


def _gpu_count(kind: str) -> int:
    if kind != "cuda":
        return 1
    import torch

    return max(1, torch.cuda.device_count())


def _measured_window(starts: list[float], end: float, warmup: int = 1) -> tuple[float, float]:
    """From the first measured step (after warm-up) to the end of the run."""
    return (starts[warmup] if len(starts) > warmup else float("-inf")), end


def _pass_first(starts: list[float], pass_starts: list[float]) -> list[int]:
    """Index of the step that opens each pass after the first (its first ``next()``)."""
    out: list[int] = []
    for p in pass_starts[1:]:
        i = bisect.bisect_left(starts, p)
        if i < len(starts) and (not out or i > out[-1]):
            out.append(i)
    return out


WAITS_CLEARLY_MORE = 1.25
"""A loader stepped in lockstep with the training loader becomes the training loader only
when it waits this many times as long (and 1 ms a step more): loaders that barely wait
(two in-memory lists zipped) no longer swap roles by scheduling noise on a loaded host."""


def _waits_most(train: Any, group: list[Any]) -> Any:
    """The loader of a lockstep ``group`` the steps wait for most; ``train`` unless another
    clearly waits more (:data:`WAITS_CLEARLY_MORE`)."""
    def waited(c: Any) -> float:
        return sum(c.waits[1:])

    slowest = max(group, key=waited)
    margin = 1e-3 * max(0, len(slowest.waits) - 1)
    if waited(slowest) > WAITS_CLEARLY_MORE * waited(train) + margin:
        return slowest
    return train


def _device_text(device: Any) -> str:
    """``"cuda:1"`` for ``"cuda:1"``, ``1`` or ``torch.device("cuda", 1)``; ``"cuda"`` without an index."""
    if isinstance(device, int) and not isinstance(device, bool):
        return f"cuda:{device}"
    return str(device) if device is not None else ""
