"""Step clocks: one :class:`LoaderClock` per loader, on whichever thread consumes it.

:class:`StepClocks` receives every ``next()`` of every hooked loader (torch's
DataLoader through :class:`~feedline.observe._torch_hooks.TorchHooks`,
feedline's Loader through :func:`feedline.spans.step_hook`, any iterable
through :func:`feedline.watch`) and times it on the loader's own clock: the
wait inside ``next()``, and the time until that loader's next ``next()`` (the
step body). A ``next()`` that starts while another one runs on the same thread
(a loader that iterates a loader) is part of the outer one, not a step. A
loader built again at the same place in the user's code (``DataLoader(...)``
inside the epoch loop) after the previous one's pass ended is the same data
path rebuilt: it continues that loader's clock (:meth:`StepClocks.clock`).
A pass of a loader begun under ``torch.no_grad()`` inside its own open pass
begun with autograd on (a quick evaluation on a few training batches every N
steps, ``for xv, yv in loader`` nested in ``for x, y in loader``) is an
evaluation data path of its own: it gets its own clock (:meth:`StepClocks.owner`).

Clocks only append to lists while running; everything derived (step bodies
with other loaders' time taken out, epoch starts moved into the wait) is
computed once by :meth:`LoaderClock.steps_view` at report time, so the run
pays for nothing at an epoch end.
"""

from __future__ import annotations

import bisect
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from feedline.observe._timing import DeviceTimer

LOADER_ATTRS = ("num_workers", "pin_memory", "prefetch_factor", "persistent_workers",
                "batch_size")


def loader_config(obj: Any) -> dict[str, Any]:
    """The settings ``obj`` exposes (DataLoader or feedline.Loader; empty for a plain iterable);
    a :class:`NestedPass` has its loader's, and ``nested_in``: the label of the loader whose
    pass it runs in."""
    if isinstance(obj, NestedPass):
        return loader_config(obj.loader) | {"nested_in": obj.parent} | (
            {} if obj.inside else {"after_training": True})
    out: dict[str, Any] = {"type": type(obj).__name__}
    for name in LOADER_ATTRS:
        value = getattr(obj, name, None)
        if isinstance(value, (bool, int)) or (value is None and name in ("prefetch_factor",
                                                                         "batch_size")):
            out[name] = value
    if "num_workers" not in out and isinstance(getattr(obj, "workers", None), int):
        out["num_workers"] = obj.workers
        out["feedline"] = True
        for name in ("worker_type", "prefetch"):
            value = getattr(obj, name, None)
            if isinstance(value, (str, int)):
                out[name] = value
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "get_num_threads"):
        out["torch_threads"] = int(torch.get_num_threads())
    if out["type"] == "DataLoader":
        ctx = getattr(obj, "multiprocessing_context", None)
        if ctx is not None:
            out["start_method"] = getattr(ctx, "_name", None) or str(ctx)
        iterable = getattr(torch.utils.data, "IterableDataset", None) if torch is not None else None
        if iterable is not None and isinstance(getattr(obj, "dataset", None), iterable):
            out["iterable"] = True  # more workers each replay the stream unless it is sharded
        out |= batching(obj)
    return out


def _same_settings(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two loaders' settings are the same (how many instances, and the kind of
    workers ``worker_type="auto"`` has moved to by now, aside)."""
    def settings(c: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in c.items() if k not in ("instances", "worker_kind", "continues")}
    return settings(a) == settings(b)


def _batch_size(loader: Any) -> int | None:
    """The samples in each of a DataLoader's batches, where it says (its ``batch_size``,
    else its batch sampler's)."""
    size = getattr(loader, "batch_size", None)
    if size is None:
        size = getattr(getattr(loader, "batch_sampler", None), "batch_size", None)
    return size if isinstance(size, int) else None


def _grad_enabled() -> bool:
    """Whether autograd records on this thread (True where torch is not loaded)."""
    torch = sys.modules.get("torch")
    enabled = getattr(torch, "is_grad_enabled", None)
    return bool(enabled()) if enabled is not None else True


def batching(obj: Any) -> dict[str, Any]:
    """How a DataLoader draws and batches its samples, where a copied call must keep it
    (advice that drops them would change the training): its own sampler or batch sampler
    (by type), ``shuffle``, ``drop_last``, its own ``collate_fn`` (by name)."""
    out: dict[str, Any] = {}
    bsampler, sampler = getattr(obj, "batch_sampler", None), getattr(obj, "sampler", None)
    if getattr(obj, "batch_size", 0) is None and bsampler is not None:
        out["batch_sampler"] = f"{type(bsampler).__name__}(...)"
    elif type(sampler).__name__ == "RandomSampler":
        out["shuffle"] = True
    elif sampler is not None and type(sampler).__name__ not in ("SequentialSampler",
                                                                 "_InfiniteConstantSampler"):
        out["sampler"] = f"{type(sampler).__name__}(...)"
    if getattr(obj, "drop_last", False) is True and "batch_sampler" not in out:
        out["drop_last"] = True
    fn = getattr(obj, "collate_fn", None)
    if fn is not None and getattr(fn, "__module__", "").startswith("torch.utils.data"):
        fn = None  # default_collate / default_convert
    if fn is not None:
        inner = getattr(fn, "func", None)  # functools.partial
        out["collate_fn"] = (f"functools.partial({getattr(inner, '__name__', '...')}, ...)"
                             if inner is not None else getattr(fn, "__name__", None)
                             or f"{type(fn).__name__}(...)")
    return out


def batch_info(batch: Any, depth: int = 0) -> tuple[int | None, int]:
    """(samples, bytes) of a batch: first dimension of the first array, total array bytes."""
    if (hasattr(batch, "shape") and hasattr(batch, "nbytes")) or hasattr(batch, "element_size"):
        shape = tuple(getattr(batch, "shape", ()))
        nbytes = int(batch.numel() * batch.element_size()) if hasattr(batch, "numel") else int(batch.nbytes)
        return (int(shape[0]) if shape else None), nbytes
    if depth > 3:
        return None, 0
    items = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, (list, tuple)) else ()
    samples, total = None, 0
    for item in items:
        s, b = batch_info(item, depth + 1)
        samples = samples if samples is not None else s
        total += b
    return samples, total


def call_site(skip: tuple[str, ...]) -> tuple[tuple[str, int], ...]:
    """The calling thread's stack as (file, line) pairs, innermost first, without the
    frames of files under the ``skip`` folders (torch's and feedline's own)."""
    out = []
    f: FrameType | None = sys._getframe(1)
    while f is not None:
        name = f.f_code.co_filename
        if not name.startswith(skip):
            out.append((name, f.f_lineno))
        f = f.f_back
    return tuple(out)


def _library_dirs() -> tuple[str, ...]:
    dirs = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]  # feedline
    torch = sys.modules.get("torch")
    path = getattr(torch, "__file__", None) if torch is not None else None
    if isinstance(path, str):
        dirs.append(os.path.dirname(os.path.abspath(path)))
    return tuple(d + os.sep for d in dirs)


@dataclass
class StepsView:
    """One loader's steps as the report sees them (seconds; warm-up included)."""

    starts: list[float]
    waits: list[float]
    bodies: list[float]
    runq: list[float]
    gpu: list[float]
    passes: list[tuple[float, float]]


@dataclass
class LoaderClock:
    """The raw timings of one loader (appended to while running)."""

    label: str
    config: dict[str, Any]
    order: int
    starts: list[float] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)
    runq: list[float] = field(default_factory=list)
    q_at: list[float] = field(default_factory=list)
    """The consumer thread's run-queue seconds (schedstat) as each wait began (loaders
    with workers; 0 otherwise): with ``runq``, the wait for a core inside each body."""
    gaps: list[tuple[float, float]] = field(default_factory=list)
    """``iter()`` calls and ending ``next()`` calls: data time between passes."""
    pass_starts: list[float] = field(default_factory=list)
    pass_ends: list[float] = field(default_factory=list)
    tids: set[int] = field(default_factory=set)
    done: dict[int, float] = field(default_factory=dict)
    """Explicit body ends (``step_done``), by step index."""
    batch_samples: int | None = None
    batch_bytes: int | None = None
    pass_step0: int = 0
    """Steps taken before the current pass began."""
    hosted: list[LoaderClock] = field(default_factory=list, repr=False)
    """Loaders that stepped on this one's thread while its current pass was open."""
    inside: LoaderClock | None = field(default=None, repr=False)
    """The loader whose open pass (2 steps or more in) this one's current pass began inside."""
    inner: bool = False
    """A pass of this loader ran inside another loader's pass, which then went on (a
    validation loader run every N training steps): it is not the training loader."""
    pass_grad: bool = True
    """The current (or last) pass began with autograd enabled."""
    grad: bool = False
    """A pass of this loader began with autograd enabled. Passes begun under
    ``torch.no_grad()`` / ``inference_mode()`` only are evaluation (a validation loader
    with ``batch_size=1`` may take more steps than the training one)."""
    trained: bool = False
    """An optimizer stepped, or a backward pass ran (a hand-written update), in one
    of this loader's step bodies (on its thread): it
    feeds training, whatever autograd mode its passes began in (``with
    torch.set_grad_enabled(phase == "train")`` inside the loop)."""
    site: tuple[tuple[str, int], ...] = ()
    """Where in the user's code the loader was first iterated (its stack)."""
    last: Any = field(default=None, repr=False)
    groups: int = 0
    seen_updates: int = 0
    """Steps begun since this thread's first update, and its updates at the last one
    begun (:meth:`StepClocks._taken`)."""
    iterators: weakref.WeakSet[Any] = field(default_factory=weakref.WeakSet, repr=False)
    """This loader's iterators not yet collected (see :meth:`StepClocks.on_iter`)."""
    timer: DeviceTimer | None = field(default=None, repr=False)
    token: Any = field(default=None, repr=False)

    @property
    def steps(self) -> int:
        return len(self.waits)

    @property
    def in_pass(self) -> int:
        """Steps taken in the current pass while it is open (0 when no pass is open)."""
        return self.steps - self.pass_step0 if len(self.pass_starts) > len(self.pass_ends) else 0

    def passes(self, end: float) -> list[tuple[float, float]]:
        """Its passes as (start, end): one left before its StopIteration (``next(iter(
        loader))`` to peek, a ``break``) ends at its last batch, so that it cannot swallow
        the steps of another loader; ``end``: when the run stopped."""
        last = self.starts[-1] + self.waits[-1] if self.starts else 0.0
        ends = list(self.pass_ends) + [min(end, max(p0, last)) for p0 in
                                       self.pass_starts[len(self.pass_ends):]]
        return list(zip(self.pass_starts, ends, strict=False))

    @property
    def counts(self) -> bool:
        """Whether this loader may be the training one (not run inside another's pass)."""
        return not self.inner and self.inside is None

    def begin_pass(self, t: float, grad: bool = True) -> None:
        """A new pass starts at ``t``. A pass still open was left before its
        StopIteration (a ``break``, a fixed number of ``next()`` calls, an engine's
        ``epoch_length``): it ends at its last batch, so that ``pass_ends`` stays one per
        ended pass and that pass cannot span the steps of other loaders after it."""
        if len(self.pass_starts) > len(self.pass_ends):
            p0 = self.pass_starts[-1]
            last = self.starts[-1] + self.waits[-1] if self.steps > self.pass_step0 else p0
            self.pass_ends.append(min(t, max(p0, last)))
        self.pass_starts.append(t)
        self.pass_grad = grad
        self.grad = self.grad or grad
        self.pass_step0 = self.steps
        self.hosted.clear()

    def body_runq(self) -> list[float]:
        """Seconds the consumer thread waited for a CPU core in each step body but the
        last (from ``q_at`` and ``runq``; zeros where they were not read)."""
        n = min(len(self.q_at), len(self.runq))
        return [max(0.0, self.q_at[i + 1] - self.q_at[i] - self.runq[i]) if self.q_at[i] else 0.0
                for i in range(n - 1)]

    def steps_view(self, end: float, others: list[tuple[int, float, float]],
                   final: bool = True) -> StepsView:
        """Per-step wait and body, with epoch starts moved into the wait and
        ``others`` (``(tid, t0, t1)`` passes of other loaders) taken out of the body.

        ``end``: when the run stopped (ends the last body if no pass end does);
        ``final=False`` reads the device timer without waiting (a partial report).
        """
        n = len(self.starts)
        waits = list(self.waits)
        bodies: list[float] = []
        gaps = _Intervals(self.gaps)
        taken_from = _Intervals([(t0, t1) for tid, t0, t1 in others if tid in self.tids])
        for i in range(n):
            b0 = self.starts[i] + self.waits[i]
            b1 = self.starts[i + 1] if i + 1 < n else gaps.first_start_after(b0, end)
            b1 = min(b1, self.done.get(i, b1))
            moved = gaps.overlap(b0, b1)
            if i + 1 < n:
                waits[i + 1] += moved  # a new pass's start-up is data time of its first step
            bodies.append(max(0.0, b1 - b0 - moved - taken_from.overlap(b0, b1)))
        gpu: list[float] = []
        if self.timer is not None:
            gpu = self.timer.finish() if final else self.timer.snapshot()
        return StepsView(list(self.starts), waits, bodies, list(self.runq), gpu, self.passes(end))


class NestedPass:
    """A loader's passes begun under ``no_grad`` inside its own open training pass (see
    :meth:`StepClocks.owner`): timed on a clock of their own. Reads the loader's settings
    through to it."""

    def __init__(self, loader: Any, parent: str, inside: bool = True) -> None:
        self.loader, self.parent, self.inside = loader, parent, inside

    def __getattr__(self, name: str) -> Any:
        if name in ("loader", "parent", "inside"):  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self.loader, name)


LONGER_PASSES = 2.0
"""A loader that may be training and whose passes took more than this many times as long as
those of the one with most steps is the training loader (:meth:`StepClocks.training`):
their time with other loaders' passes inside them and the first wait (warm-up) left out."""

LONGER_BY_S = 0.1
"""... and at least this many seconds longer: a peek's microseconds before the loop, stretched
by a preemption, are not where a run trains."""

IN_TURN = 8
"""A loader taken in turn with another steps at least once every this many of its steps
(a GAN's generator loader beside ``n_critic`` discriminator draws, 5 in WGAN)."""


def lockstep(a: LoaderClock, b: LoaderClock) -> bool:
    """Whether ``a`` and ``b`` are stepped in turn on the same thread: loaders zipped
    together (``for x, u in zip(labelled, unlabelled)``), tasks taken in turn, or k draws
    of one per draw of the other (a GAN's discriminator and generator loaders), so the
    steps wait for both. The one with fewer steps steps at most once between two steps of
    the other, and most of its steps fall so, spread over the run. A validation loader
    run every N steps is not: its passes put several steps between two of the other's,
    and none between the rest."""
    if not (a.tids & b.tids) or min(len(a.starts), len(b.starts)) < 4:
        return False
    more, fewer = (a, b) if len(a.starts) >= len(b.starts) else (b, a)
    if len(fewer.starts) * IN_TURN < len(more.starts):
        return False
    one = many = 0
    for lo, hi in zip(more.starts, more.starts[1:], strict=False):
        k = bisect.bisect_left(fewer.starts, hi) - bisect.bisect_left(fewer.starts, lo)
        one += k == 1
        many += k > 1
    gaps = len(more.starts) - 1
    return one >= 0.8 * (len(fewer.starts) - 1) and many <= 0.1 * gaps


def fold_waits(view: StepsView, partners: list[StepsView]) -> StepsView:
    """``view`` with the waits of loaders stepped in lockstep with it (see :func:`lockstep`)
    moved from its step bodies into its waits: each step waited for all of them."""
    waits = _Intervals([(s, s + w) for p in partners
                        for s, w in zip(p.starts, p.waits, strict=False)])
    out_w, out_b = list(view.waits), list(view.bodies)
    for i, (t0, w) in enumerate(zip(view.starts, view.waits, strict=False)):
        b0 = t0 + w
        b1 = view.starts[i + 1] if i + 1 < len(view.starts) else b0 + out_b[i]
        moved = min(out_b[i], waits.overlap(b0, b1))
        out_w[i] += moved
        out_b[i] -= moved
    return StepsView(view.starts, out_w, out_b, view.runq, view.gpu, view.passes)


DRAWS_PER_STEP = 1.5
"""A training loader whose draws outnumber the updates between them by this much on
average takes several ``next()`` calls per step (see :func:`group_draws`)."""


def group_draws(view: StepsView, updates: list[float]) -> tuple[StepsView, list[int]]:
    """``view`` with the draws between two updates made one step, and where each step
    starts (draw indices).

    A step is what lies between two updates (optimizer steps or backward passes on the
    loader's thread, ``updates`` sorted): samples stacked by hand from
    ``DataLoader(batch_size=None)`` (16 ``next()`` calls a step), a support and a query
    batch, a mixup partner from a second iterator of the same loader. Their waits and
    bodies add up. Several updates per draw (LBFGS's closure, data echoing) leave one
    draw a step; so does a loop with fewer than two updates, or with about one a draw
    (``view`` is returned as it is, with one start per draw).
    """
    n = len(view.starts)
    firsts = [0] + [i for i in range(1, n)
                    if bisect.bisect_right(updates, view.starts[i])
                    > bisect.bisect_right(updates, view.starts[i - 1])]
    if n == 0 or len(updates) < 2 or len(firsts) * DRAWS_PER_STEP > n:
        return view, list(range(n))
    bounds = list(zip(firsts, [*firsts[1:], n], strict=True))

    def added(xs: list[float]) -> list[float]:
        return [sum(xs[a:b]) for a, b in bounds] if len(xs) >= n else list(xs)

    grouped = StepsView([view.starts[a] for a, _ in bounds], added(view.waits),
                        added(view.bodies), added(view.runq), added(view.gpu), view.passes)
    return grouped, firsts


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


class _Intervals:
    """Sorted intervals answering "how much of [a, b) do you cover" in O(log n + hits)."""

    def __init__(self, items: list[tuple[float, float]]) -> None:
        self.items = sorted(items)
        self.starts = [a for a, _ in self.items]
        self.reach: list[float] = []  # running maximum of the ends
        top = float("-inf")
        for _, b in self.items:
            top = max(top, b)
            self.reach.append(top)

    def overlap(self, a: float, b: float) -> float:
        i = bisect.bisect_left(self.starts, a)
        j = i - 1
        while j >= 0 and self.reach[j] > a:  # earlier intervals still open at a
            j -= 1
        total = 0.0
        for k in range(j + 1, len(self.items)):
            s0, s1 = self.items[k]
            if s0 >= b:
                break
            total += _overlap(a, b, s0, s1)
        return total

    def first_start_after(self, a: float, default: float) -> float:
        i = bisect.bisect_left(self.starts, a)
        return self.starts[i] if i < len(self.starts) else default


def _merged(items: list[tuple[float, float]]) -> _Intervals:
    """``items`` as disjoint intervals (a pass nested in another counts once)."""
    out: list[tuple[float, float]] = []
    for a, b in sorted(items):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return _Intervals(out)


class StepClocks:
    """Routes every ``next()`` of every loader to that loader's :class:`LoaderClock`.

    Args:
        make_timer: a device timer for a new clock (CUDA events on a GPU), or None.
        runq: reads the calling thread's run-queue seconds (sampled around waits of
            loaders with workers).
        steps: end the run once the training loader (one not run inside another
            loader's pass, see :meth:`_switch`) has taken this many steps (None: never);
            ``on_limit(clock)`` then decides (replay the last batch, or end).
        on_limit: called instead of the fetch once the limit is reached; returns
            the batch to hand out or raises.
    """

    def __init__(self, make_timer: Callable[[], DeviceTimer | None],
                 runq: Callable[[], float], steps: int | None = None,
                 on_limit: Callable[[LoaderClock], Any] | None = None,
                 on_milestone: Callable[[], None] | None = None) -> None:
        self._make_timer, self._runq = make_timer, runq
        self.on_milestone = on_milestone
        """Called (cheaply, on the consumer thread) when a loader's step count reaches 16,
        64, 256... (powers of 4): partial reports are taken there, off the consumer thread."""
        self.steps, self.on_limit = steps, on_limit
        self.clocks: dict[int, LoaderClock] = {}
        self.aliases: dict[int, int] = {}
        """``id`` of a rebuilt loader -> the key of the clock it continues."""
        self._owners: list[Any] = []  # keeps owners alive so their ids stay theirs
        self._nested: dict[tuple[int, bool], NestedPass] = {}
        """Each loader's evaluation passes nested in its training pass (:meth:`owner`)."""
        self._lock = threading.Lock()
        self._tls = threading.local()
        self.primary: Any = None
        """The training loader when the caller names it (``feedline.watch``)."""
        self.opt_tids: set[int] = set()
        """Threads on which an optimizer stepped (or a backward pass ran after a step)."""
        self.delivered: Callable[[str, float], None] | None = None
        """Told ``(label, time)`` on the consumer thread as each ``next()`` returns its batch
        (:meth:`~feedline.observe._torch_hooks.TorchHooks.delivered`)."""
        self.updates: dict[int, list[float]] = {}
        """When each thread stepped an optimizer or ran a backward pass (after a draw):
        what ends a training step that takes several draws (:func:`group_draws`)."""

    # -- naming
    def owner(self, loader: Any) -> Any:
        """What a new iterator of ``loader`` made now on this thread is timed as:
        ``loader``, or its :class:`NestedPass` when autograd is off and either
        ``loader``'s own pass, begun with autograd on, is open on this thread with a step
        in it (an evaluation on the training loader's batches inside the training loop),
        or its passes, the last begun with autograd on, fed an optimizer and have all
        ended (a forward-only pass over the training data after training, as
        ``torch.optim.swa_utils.update_bn`` makes: not training steps)."""
        c = self.find(loader)
        if c is None or isinstance(loader, NestedPass) or _grad_enabled() or not c.pass_grad:
            return loader
        inside = bool(c.in_pass) and threading.get_ident() in c.tids
        after = (not inside and c.trained and bool(c.pass_starts)
                 and len(c.pass_starts) == len(c.pass_ends))
        if not inside and not after:
            return loader
        with self._lock:
            key = (id(loader), inside)
            nested = self._nested.get(key)
            if nested is None:
                nested = self._nested[key] = NestedPass(loader, c.label, inside)
        return nested

    def find(self, owner: Any) -> LoaderClock | None:
        """The clock of ``owner`` if it has one."""
        key = id(owner)
        return self.clocks.get(self.aliases.get(key, key))

    def clock(self, owner: Any) -> LoaderClock:
        """The clock of ``owner``, made at its first use; a loader like an earlier one (the
        same settings), first used at the same place in the user's code (the same stack)
        after that one's pass ended, continues the earlier one's clock (a loader rebuilt
        every epoch is one data path; its settings get ``instances``)."""
        c = self.find(owner)
        if c is None:
            with self._lock:
                c = self.find(owner)
                if c is None:
                    config = loader_config(owner)
                    site = call_site(_library_dirs())
                    key = next((k for k, o in self.clocks.items() if o.site == site and site
                                and len(o.pass_starts) == len(o.pass_ends)
                                and _same_settings(o.config, config)),
                               None)
                    self._owners.append(owner)  # keeps its id its own
                    if key is not None:
                        c = self.clocks[key]
                        c.config["instances"] = int(c.config.get("instances", 1)) + 1
                        self.aliases[id(owner)] = key
                        return c
                    key = self._continues(owner)
                    if key is not None:
                        c = self.clocks[key]
                        # the later loader's settings are the ones the run goes on with
                        c.config = config | {k: c.config[k] for k in ("instances",)
                                             if k in c.config} | {
                            "continues": int(c.config.get("continues", 0)) + 1}
                        self.aliases[id(owner)] = key
                        return c
                    n = len(self.clocks) + 1
                    c = LoaderClock(f"loader-{n}", config, n, site=site)
                    c.timer = self._make_timer()
                    self.clocks[id(owner)] = c
        return c

    def _continues(self, owner: Any) -> int | None:
        """The key of the training loader ``owner`` continues, if any: a new DataLoader
        over the very same dataset object as one whose passes have all ended and that fed
        an optimizer, first iterated with autograd on, with the same batch size where both
        say (a run resumed mid-epoch through a loader that skips the batches already
        trained on, then the ordinary loader for the next epochs: one data path, not a
        second loader). Loaders over other objects (the folds of k-fold ``Subset``s, a
        validation set) and passes begun under no_grad stay their own. Called under
        ``self._lock``."""
        data = getattr(owner, "dataset", None)
        if data is None or not _grad_enabled():
            return None
        size = _batch_size(owner)
        for o in self._owners:
            if o is owner or getattr(o, "dataset", None) is not data:
                continue
            key = self.aliases.get(id(o), id(o))
            c = self.clocks.get(key)
            if (c is not None and c.trained and c.pass_starts
                    and len(c.pass_starts) == len(c.pass_ends)
                    and (None in (size, _batch_size(o)) or size == _batch_size(o))):
                return key
        return None

    def owners_of(self, c: LoaderClock) -> list[Any]:
        """The loaders timed on clock ``c`` (one, or each instance of a rebuilt loader)."""
        return [o for o in self._owners if self.find(o) is c]

    def labels(self) -> dict[int, str]:
        """Each loader's label by the ``id`` of its owner, rebuilt loaders included."""
        out = {key: c.label for key, c in self.clocks.items()}
        return out | {a: self.clocks[k].label for a, k in self.aliases.items()}

    def label(self, owner: Any) -> str:
        return self.clock(owner).label

    def current(self) -> str | None:
        """The label of the loader this thread is fetching from, if any."""
        c = getattr(self._tls, "clock", None)
        return c.label if c is not None else None

    # -- events
    def on_iter(self, owner: Any, t0: float, t1: float, it: Any = None) -> None:
        """``iter(owner)`` ran from ``t0`` to ``t1`` and made ``it``: a new pass starts
        (its iterator is counted at the pass's first ``next()``, :meth:`_count_live`)."""
        c = self.clock(owner)
        c.gaps.append((t0, t1))
        c.begin_pass(t0, _grad_enabled())
        if it is not None and c.config.get("num_workers"):
            try:
                c.iterators.add(it)
            except TypeError:  # not weakly referenceable: not counted
                return

    @staticmethod
    def _count_live(c: LoaderClock) -> None:
        """Iterators of one DataLoader alive at once (a mixup partner, a GAN's two draws)
        each run their own ``num_workers`` processes: the most seen at once as a pass
        draws its first batch is the config's ``live_iterators``. Counted then, not at
        ``iter()``: ``it = iter(loader)`` makes the new iterator before the old one is
        dropped, and a torch iterator whose workers are shut down (at its end, or dropped)
        is not alive."""
        if not c.iterators:
            return
        live = sum(not getattr(i, "_shutdown", True) for i in list(c.iterators))
        if live > int(c.config.get("live_iterators") or 1):
            c.config["live_iterators"] = live

    def on_teardown(self, owner: Any, t0: float, t1: float) -> None:
        """An iterator of ``owner`` dropped before its end shut its workers down from
        ``t0`` to ``t1`` on this thread: data time between passes, like ``iter()``'s
        start-up (moved from the step body into the next wait). Inside a ``next()`` (the
        pass's end) it is already in the wait; on a thread that never drew from
        ``owner`` (a garbage collection elsewhere) it is nobody's step."""
        c = self.find(owner)
        if (c is None or getattr(self._tls, "clock", None) is not None
                or threading.get_ident() not in c.tids):
            return
        c.gaps.append((t0, t1))

    def on_next(self, owner: Any, fetch: Callable[[], Any]) -> Any:
        """Run one ``next()`` of ``owner`` (``fetch()``), timed on its clock."""
        tls = self._tls
        if getattr(tls, "clock", None) is not None:
            return fetch()  # inside another loader's next() on this thread: part of it
        c = self.clock(owner)
        now = time.perf_counter()
        self._close_body(c)
        if len(c.pass_starts) == len(c.pass_ends):  # a Loader (no iter hook): pass starts now
            c.begin_pass(now, _grad_enabled())
        prev = getattr(tls, "prev", None)
        if prev is not c:
            self._switch(prev, c)
            tls.prev = c
        elif c.inside is not None and c.steps == c.pass_step0:
            c.inside = None  # a new pass straight after its own: it runs on its own
        if (self.steps is not None and self._taken(c) >= self.steps and c.counts
                and self.on_limit is not None and self._may_train(c)):
            return self.on_limit(c)
        workers = bool(c.config.get("num_workers"))
        q0 = self._runq() if workers else 0.0
        tls.clock = c
        t0 = time.perf_counter()
        try:
            batch = fetch()
        except StopIteration:
            t1 = time.perf_counter()
            c.gaps.append((t0, t1))
            c.pass_ends.append(t1)
            raise
        finally:
            tls.clock = None
        t1 = time.perf_counter()
        if c.config.get("worker_type") == "auto":  # threads or processes: what it runs now
            kind = getattr(owner, "worker_kind", None)
            if isinstance(kind, str):
                c.config["worker_kind"] = kind
        c.starts.append(t0)
        c.waits.append(t1 - t0)
        c.runq.append(max(0.0, self._runq() - q0) if workers else 0.0)
        c.q_at.append(q0)
        if c.steps <= 2:
            c.tids.add(threading.get_ident())
            samples, nbytes = batch_info(batch)
            c.batch_samples = c.batch_samples or samples
            c.batch_bytes = nbytes or c.batch_bytes
        c.last = batch
        if c.steps == c.pass_step0 + 1:
            self._count_live(c)
        n = c.steps
        if n >= 16 and n & (n - 1) == 0 and n.bit_length() % 2 == 1 and self.on_milestone:
            self.on_milestone()
        if c.timer is not None:
            c.token = c.timer.start()
        if self.delivered is not None:
            self.delivered(c.label, time.perf_counter())
        return batch

    def _taken(self, c: LoaderClock) -> int:
        """Steps ``c`` has taken before the ``next()`` now starting, for ``steps=N``: its
        draws until this thread updates (an inference loop never does), then the draws
        that followed an update (:func:`group_draws`: samples stacked by hand are one step
        of 16 draws); a draw in the middle of a step does not end the run (-1)."""
        ups = self.updates.get(threading.get_ident())
        n = len(ups) if ups else 0
        if n == 0:
            return c.steps
        if n == c.seen_updates and c.steps:
            return -1
        c.seen_updates = n
        c.groups = c.groups + 1 if c.groups else 2  # the draws before the first update: one
        return c.groups - 1

    @staticmethod
    def _switch(prev: LoaderClock | None, c: LoaderClock) -> None:
        """This thread steps ``c`` after ``prev``: note which loader runs inside which.

        A loader that resumes its open pass after others stepped (training after
        validation) hosted them: they are inner. A loader that starts while another's
        pass is open with 2 steps or more in it is inside that one until it resumes
        (so a long first validation pass does not count as training steps); a single
        step (``next(iter(loader))`` to peek at a batch) does not count as a pass, and
        a loader that starts a new pass straight after its own runs on its own.
        """
        if c.hosted and c.in_pass:
            for other in c.hosted:
                other.inner, other.inside = True, None
            c.hosted.clear()
        if prev is None:
            return
        if prev.in_pass >= 2 and c not in prev.hosted:
            prev.hosted.append(c)
            if c.steps == c.pass_step0:
                c.inside = prev

    def on_optimizer_step(self) -> None:
        """An optimizer stepped on this thread: the loader this thread stepped last feeds
        training, unless its pass has ended (a validation pass run before the update in
        the same step body): then the one whose open pass stepped last on this thread."""
        tid = threading.get_ident()
        if tid not in self.opt_tids:
            self.opt_tids.add(tid)
        ups = self.updates.get(tid)
        if ups is None:
            ups = self.updates[tid] = []
        ups.append(time.perf_counter())
        c = getattr(self._tls, "prev", None)
        if c is None or (c.trained and len(c.pass_starts) > len(c.pass_ends)):
            return
        if len(c.pass_starts) == len(c.pass_ends):
            open_ = [o for o in list(self.clocks.values()) if o.starts and tid in o.tids
                     and len(o.pass_starts) > len(o.pass_ends)]
            c = max(open_, key=lambda o: o.starts[-1], default=None)
        if c is not None:
            c.trained = True

    def on_backward(self) -> None:
        """An autograd backward pass ran on this thread: an update as
        :meth:`on_optimizer_step` tells it (a loop that updates its parameters by hand,
        ``p.data -= lr * p.grad``, steps no optimizer; a validation loop under autograd
        runs no backward). One before any step on this thread (a warm-up) tells nothing."""
        if getattr(self._tls, "prev", None) is not None:
            self.on_optimizer_step()

    def evaluation(self, c: LoaderClock) -> bool:
        """Whether the updates tell ``c`` is not training: an optimizer stepped (or a
        backward pass ran) on a thread that consumed ``c``, never in ``c``'s step bodies.
        A loader consumed on a thread that never stepped one (a producer thread feeding a
        queue) is not told."""
        return not c.trained and bool(c.tids & self.opt_tids)

    def step_done(self, owner: Any) -> None:
        """End the current body of ``owner``'s clock now (an explicit step boundary)."""
        c = self.find(owner)
        if c is not None and c.steps and c.steps - 1 not in c.done:
            c.done[c.steps - 1] = time.perf_counter()
            self._close_body(c)

    def _close_body(self, c: LoaderClock) -> None:
        if c.timer is not None and c.token is not None:
            c.timer.stop(c.token)
            c.token = None

    def close(self) -> None:
        """End every open body (at the end of the run)."""
        for c in list(self.clocks.values()):
            self._close_body(c)

    def updates_of(self, c: LoaderClock) -> list[float]:
        """The updates on the threads that consumed ``c``, in time order."""
        return sorted(t for tid in c.tids for t in self.updates.get(tid, ()))

    def _may_train(self, c: LoaderClock) -> bool:
        """Whether ``c`` may be the training loader as far as the optimizer and autograd
        tell: not :meth:`evaluation`, and it began a pass with autograd enabled, or no
        loader did (an inference run)."""
        if self.evaluation(c):
            return False
        return c.grad or not any(o.grad for o in list(self.clocks.values()))

    def training(self) -> LoaderClock | None:
        """The training loader: the one named by the caller, else the one with most steps
        among those not run inside another loader's pass (ties: the one stepped first),
        leaving out those the optimizer tells are not training (:meth:`evaluation`), then
        preferring those with a pass begun with autograd enabled (:attr:`LoaderClock.grad`);
        but one of those whose passes took more than :data:`LONGER_PASSES` times as long
        as its passes is where the run trains (two training sets taken in turn by epoch:
        16 quick in-memory batches against 12 slow ones, most of the run spent on these).
        None before any step."""
        if self.primary is not None and self.find(self.primary) is not None:
            return self.find(self.primary)
        most, longest = self._most_and_longest()
        return longest if longest is not None else most

    def chosen_for_time(self, c: LoaderClock) -> bool:
        """Whether :meth:`training` chose ``c`` for its passes' time, not its steps."""
        return self.primary is None and self._most_and_longest()[1] is c

    def _most_and_longest(self) -> tuple[LoaderClock | None, LoaderClock | None]:
        """Of the loaders that may be training: the one with most steps, and one whose
        passes took more than :data:`LONGER_PASSES` times as long as its (or None)."""
        stepped = [c for c in self.clocks.values() if c.steps]
        stepped = [c for c in stepped if not c.inner] or stepped
        # not evaluation by the optimizer's account, then not by autograd's (no_grad only)
        stepped = [c for c in stepped if not self.evaluation(c)] or stepped
        stepped = [c for c in stepped if c.grad] or stepped
        if not stepped:
            return None, None
        most = min(stepped, key=lambda c: (-c.steps, c.starts[0]))
        if len(stepped) == 1:
            return most, None
        end = time.perf_counter()
        spent = {id(c): self._own_time(c, end) for c in stepped}
        if not 0.0 < spent[id(most)] >= 0.5 * self._own_time(most, end, alone=True):
            # its passes run mostly inside another loader's open pass (an iterator made before
            # the loop and stepped by hand inside it, a peek left open): the two are not taken
            # in turn, so their time cannot tell which one trains
            return most, None
        longest = max(stepped, key=lambda c: spent[id(c)])
        longer = (spent[id(longest)] > LONGER_PASSES * spent[id(most)]
                  and spent[id(longest)] - spent[id(most)] > LONGER_BY_S)
        return most, (longest if longer else None)

    def _own_time(self, c: LoaderClock, end: float, alone: bool = False) -> float:
        """Seconds of ``c``'s passes, the passes of other loaders on its threads (validation
        run inside them) taken out (``alone``: left in), and its first wait (its workers'
        start, warm-up)."""
        inside = _merged([] if alone else [p for o in list(self.clocks.values())
                                           if o is not c and o.tids & c.tids for p in o.passes(end)])
        total = sum(b - a - inside.overlap(a, b) for a, b in c.passes(end))
        return max(0.0, total - (c.waits[0] if c.waits else 0.0))
