"""Known data-path mistakes, detected from what a run measured.

Each :class:`Finding` says what is wrong and what to change, in the user's
own terms: ``DataLoader(num_workers=..., ...)`` for a DataLoader user,
``Loader(workers=..., ...)`` for a feedline.Loader user (who is never told to
switch to the tool they already use), with pinning advice only where there is
a GPU to copy to. :func:`detect` is a pure function of a :class:`RunFacts`, so
every rule is testable without a GPU.
"""

from __future__ import annotations

import itertools
import math
import os
import shutil
import statistics
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

SEVERITIES = ("high", "warning", "info")
STEP_CONTENTION = 0.25
"""Share of the step body spent queued for a core above which the step is contended."""
LONG_STEP = 3.0
"""A step body this many times the median (and 5 ms longer) is a long step."""
LONG_SHARE = 0.15
"""Share of the measured time that long steps spend beyond the median, above which they
are a finding (and, for a compute-bound run, what the recommendation names first)."""


@dataclass(frozen=True)
class Finding:
    """One detected mistake: a stable ``code``, ``severity``, what was seen, what to change."""

    code: str
    severity: str
    message: str
    fix: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


@dataclass
class RunFacts:
    """What the rules look at (all times in seconds, per step unless named)."""

    device_type: str
    verdict: str
    stall_fraction: float
    gpu_utilisation: float | None
    step_p50: float
    wait_p50: float
    """Median wait for data (time queued for a CPU core excluded)."""
    wait_p99: float
    loader: dict[str, Any] = field(default_factory=dict)
    copies: dict[str, int] = field(default_factory=dict)
    batch_bytes: int | None = None
    cores: int = 1
    gpus: int = 1
    shm_free: int | None = None
    pinned_series: list[float] = field(default_factory=list)
    workers_rec: int = 1
    contention: float = 0.0
    """Fraction of the step the training thread waited for a CPU core inside next()."""
    step_contention: float = 0.0
    """Fraction of the step body the training thread waited for a CPU core."""
    blocked_fraction: float = 0.0
    """Share of the data path's time that was blocked (I/O, sleep, locks), not CPU."""
    io_workers: int = 1
    """Workers the cores carry given ``blocked_fraction`` (cores / (1 - blocked))."""
    fetch_p99: float = 0.0
    """p99 seconds to prepare one batch."""
    gil_bound: bool = False
    epoch_start_wait: float = 0.0
    """Median wait of the first step of the second and later epochs."""
    epoch_starts: int = 0
    """How many such steps were measured."""
    steps_per_pass: float = 0.0
    """Mean measured steps per pass of the loader (below 2: a new iterator every step)."""
    pass_stalls: list[float] = field(default_factory=list)
    """Share of each pass's (epoch's) time spent waiting for data (empty: one pass)."""
    quiet: float = 0.0
    """Seconds from the last batch any hooked loader delivered to the end of the run."""
    measured: float = 0.0
    """Seconds of the measured steps (their waits and bodies, warm-up excluded)."""
    binding: str = ""
    """The stage that binds (``decode``, ``read``, ``gpu``...)."""
    decode_gain: tuple[float, float] | None = None
    """Stage-model step (s) now and with the CPU's decode stage moved to the GPU."""
    gpu_decoder: str | None = None
    """An installed GPU JPEG library (``torchvision``, ``nvimgcodec``), if any."""
    placement: dict[str, Any] | None = None
    """Where loader workers belong on this host (:func:`feedline.placement.plan_placement`)."""
    body_p50: float = 0.0
    """Median step body on the consumer thread (between one batch and the next ``next()``)."""
    long: LongSteps | None = None
    """Long step bodies that cost a share of the run (:func:`long_steps`)."""


@dataclass(frozen=True)
class LongSteps:
    """Step bodies far above the median: work in the loop that is neither data nor the
    ordinary step (a ``torch.save`` every N steps, logging, evaluation, a slow phase)."""

    count: int
    steps: int
    median: float
    typical: float
    """Median of the long bodies (seconds)."""
    share: float
    """Their time beyond the median step, as a share of the measured time."""
    every: int | None
    """Steps between them when they recur at a fixed period, else None."""

    def said(self) -> str:
        when = f" (once every {self.every} steps)" if self.every else ""
        return (f"{self.count} of {self.steps} steps took {self.typical * 1e3:.0f} ms against a "
                f"median of {self.median * 1e3:.0f} ms{when}, {self.share:.0%} of the "
                "measured time")


def long_steps(bodies: list[float], measured: float) -> LongSteps | None:
    """The long step bodies among ``bodies`` (in step order) when their time beyond the
    median is at least :data:`LONG_SHARE` of ``measured`` (the steps' waits and bodies),
    with their period when most of the gaps between them are one number of steps."""
    if len(bodies) < 8 or measured <= 0:
        return None
    med = statistics.median(bodies)
    cut = max(LONG_STEP * med, med + 0.005)
    idx = [i for i, b in enumerate(bodies) if b > cut]
    if len(idx) < 2:
        return None
    share = sum(bodies[i] - med for i in idx) / measured
    if share < LONG_SHARE:
        return None
    gaps = [b - a for a, b in itertools.pairwise(idx)]
    gap, seen = Counter(gaps).most_common(1)[0]
    every = gap if gap >= 2 and seen >= max(1, math.ceil(2 * len(gaps) / 3)) else None
    typical = statistics.median(bodies[i] for i in idx)
    return LongSteps(len(idx), len(bodies), med, typical, share, every)


def recommended_workers(cores: int, gpus: int) -> int:
    """The seed's rule of thumb: ``min(cores / gpus, 8)``, at least 1."""
    import importlib

    doctor_rule = getattr(importlib.import_module("feedline.doctor"), "recommended_workers", None)
    if doctor_rule is None:  # feedline.doctor without the rule yet: the same formula here
        return max(1, min(cores // max(gpus, 1), 8))
    return max(1, int(doctor_rule(cores, gpus)))


def shm_free_bytes(path: str = "/dev/shm") -> int | None:
    """Free bytes in /dev/shm, or ``None`` where it does not exist."""
    if not os.path.isdir(path):
        return None
    return shutil.disk_usage(path).free


def worker_processes(loader: dict[str, Any]) -> int:
    """The loader's workers running at once: ``num_workers`` for each of its iterators
    alive at the same time (``live_iterators``, see
    :meth:`~feedline.observe._clock.StepClocks.on_iter`)."""
    return int(loader.get("num_workers") or 0) * int(loader.get("live_iterators") or 1)


def loader_call(loader: dict[str, Any], workers: int, cuda: bool, **extra: Any) -> str:
    """The loader construction the advice asks for, in the user's own loader's terms
    (its batch size, ``batch_size=None`` included, its sampler or batch sampler, shuffle,
    drop_last and collate_fn as :func:`~feedline.observe._clock.batching` found them, its
    worker type or start method)."""
    bs = loader.get("batch_size")
    if loader.get("feedline"):
        args = [f"workers={workers}"]
        if loader.get("worker_type") == "process" and "worker_type" not in extra:
            args.append("worker_type='process'")
        args += [f"{k}={v!r}" for k, v in extra.items()]
        return "Loader(dataset" + (f", batch_size={bs}" if bs else "") + ", " + ", ".join(args) + ")"
    if loader.get("batch_sampler"):
        bs = None  # batch_sampler= excludes batch_size=
    elif "batch_size" in loader and bs is None:
        bs = "None"  # the dataset returns whole batches: a copied call must keep that
    # how it draws and batches (a copied call must keep them), then the advice
    args = [f"{k}=True" if v is True else f"{k}={v}" for k, v in loader.items()
            if k in ("batch_sampler", "sampler", "shuffle", "drop_last", "collate_fn")]
    live = int(loader.get("live_iterators") or 1)
    args.append(f"num_workers={math.ceil(workers / live)}")  # each live iterator starts them
    if loader.get("start_method") and workers > 0:
        args.append(f"multiprocessing_context={loader['start_method']!r}")
    if cuda:
        args.append("pin_memory=True")
    args.append("persistent_workers=True")
    args += [f"{k}={v!r}" for k, v in extra.items()]
    call = "DataLoader(dataset" + (f", batch_size={bs}" if bs else "") + ", " + ", ".join(args) + ")"
    if live > 1 and workers > 1:
        call += (f" ({live} iterators of this loader were alive at once, each with its own "
                 f"workers: {math.ceil(workers / live) * live} worker processes in all)")
    if loader.get("iterable") and workers > 1 and int(loader.get("num_workers") or 0) <= 1:
        call += (" (an IterableDataset: split its stream between the workers in __iter__ with "
                 "torch.utils.data.get_worker_info(), or each worker yields every sample)")
    return call


def _switch(f: RunFacts) -> str:
    """A switch to feedline.Loader, offered only to users of another loader."""
    return "" if f.loader.get("feedline") else " or switch to feedline.Loader"


def _workers_rules(f: RunFacts) -> list[Finding]:
    out: list[Finding] = []
    w = f.loader.get("num_workers")
    if w is None:
        return out
    cap = recommended_workers(f.cores, f.gpus)
    cuda = f.device_type == "cuda"
    if f.gil_bound:
        out.append(Finding(
            "gil-bound-threads", "high" if f.verdict == "data-bound" else "warning",
            f"{w} thread workers run Python under one GIL: one runs at a time, the training "
            "thread waits for the GIL too, and more threads add nothing",
            f"use processes: Loader(..., worker_type=\"process\", workers={min(w, f.cores)})",
        ))
        return out
    if w == 0:
        sev = "high" if f.verdict == "data-bound" else "warning"
        out.append(Finding(
            "num-workers-zero", sev,
            f"num_workers=0: reading, decoding and collating run in the training process, "
            f"in series with the step ({f.stall_fraction:.0%} of each step waits for data)",
            f"use {loader_call(f.loader, f.workers_rec, f.device_type == 'cuda')}{_switch(f)}",
        ))
    elif f.blocked_fraction >= 0.5:
        # I/O-bound: a blocked worker holds no core, so more workers than cores is right
        # up to cores / (1 - blocked); only far past that do they fight for cores.
        if w > f.io_workers and f.contention >= 0.05:
            out.append(Finding(
                "workers-above-io-need", "warning",
                f"num_workers={w}: {f.blocked_fraction:.0%} of each fetch is blocked, so "
                f"{f.cores} cores carry about {f.io_workers} workers, and the trainer waited "
                f"{f.contention:.0%} of each step for a core",
                f"use {loader_call(f.loader, f.io_workers, cuda)}",
            ))
    elif w > f.cores:
        out.append(Finding(
            "workers-above-cores", "high",
            f"num_workers={w} is above the {f.cores} CPU cores for a data path that is "
            f"{1 - f.blocked_fraction:.0%} CPU work: workers fight for cores and context "
            "switches eat the gain",
            f"use {loader_call(f.loader, cap, cuda)}",
        ))
    elif w > cap:
        out.append(Finding(
            "workers-above-rule", "warning",
            f"num_workers={w} is above min(cores/gpus, 8) = {cap} for {f.cores} cores and "
            f"{f.gpus} GPU(s)",
            f"use {loader_call(f.loader, cap, cuda)}",
        ))
    return out


def _copy_rules(f: RunFacts) -> list[Finding]:
    out: list[Finding] = []
    c = f.copies
    if f.loader.get("pin_memory") and c.get("blocking_from_pinned", 0):
        out.append(Finding(
            "pinned-blocking-copy", "high",
            f"pin_memory=True, but {c['blocking_from_pinned']} of {c.get('count', 0)} copies "
            "call .to(device) without non_blocking=True, so each copy blocks the host and "
            "nothing overlaps",
            "write batch.to(device, non_blocking=True)" + (
                "" if f.loader.get("feedline") else
                " (or let feedline.Loader do the copy on its copy stream)"),
        ))
    if c.get("pageable", 0):
        out.append(Finding(
            "pageable-copy", "warning",
            f"{c['pageable']} of {c.get('count', 0)} host-to-device copies read pageable "
            "memory: the driver stages them through a pinned bounce buffer (extra copy, "
            "synchronous, about half the PCIe bandwidth)",
            "set DataLoader(..., pin_memory=True) and copy with non_blocking=True" + (
                "" if f.loader.get("feedline") else ", or use feedline.Loader (pinned slot pool)"),
        ))
    return out


def _memory_rules(f: RunFacts) -> list[Finding]:
    out: list[Finding] = []
    w = int(f.loader.get("num_workers") or 0)
    pf = int(f.loader.get("prefetch_factor") or 2)
    if w > 0 and f.batch_bytes and f.shm_free is not None:
        need = pf * w * f.batch_bytes
        if need > f.shm_free:
            out.append(Finding(
                "shm-too-small", "high",
                f"prefetch_factor x num_workers x batch bytes = {pf} x {w} x "
                f"{f.batch_bytes / 2**20:.1f} MiB = {need / 2**20:.0f} MiB, but /dev/shm has "
                f"{f.shm_free / 2**20:.0f} MiB free: workers will hit SIGBUS or stall",
                "raise /dev/shm (docker run --shm-size=...), or lower prefetch_factor / "
                "num_workers" + ("" if f.loader.get("feedline") else
                                 ", or use feedline.Loader with thread workers"),
            ))
    s = f.pinned_series
    if len(s) >= 4 and s[-1] > 2 * max(s[len(s) // 4], 1) and all(
        b >= a for a, b in zip(s[len(s) // 4:], s[len(s) // 4 + 1:], strict=False)
    ):
        out.append(Finding(
            "pinned-growth", "high",
            f"pinned host memory grew without levelling off: {s[len(s) // 4] / 2**20:.0f} -> "
            f"{s[-1] / 2**20:.0f} MiB",
            "keep no references to old pinned batches; bound the prefetch queue" + (
                "" if f.loader.get("feedline") else
                ", or use feedline.Loader (pinned pool with a byte budget)"),
        ))
    return out


def _timing_rules(f: RunFacts) -> list[Finding]:
    out: list[Finding] = []
    util = f.gpu_utilisation
    if util is not None and util < 0.7 and f.stall_fraction >= 0.2:
        what = "GPU" if f.device_type == "cuda" else "compute"
        fix = ("overlap loading with compute: more workers and prefetch" + (
            ", pinned memory with non_blocking copies" if f.device_type == "cuda" else "")
            + ("" if f.loader.get("feedline") else " (feedline.Loader does this)"))
        if f.binding == "sampler":  # drawn in the training process: workers cannot overlap it
            fix = ("make the sampler cheap: it draws every batch's indices in the training "
                   "process, where more workers and prefetch do not overlap it")
        elif f.binding == "loop_transform":  # the loop's own work on the batch, no wait at all
            fix = ("move the work the loop does on each batch before the model's forward "
                   "(augmentation) into the loader's workers, which overlap it with the step")
        out.append(Finding(
            "device-idle-waiting", "high",
            f"the {what} is busy {util:.0%} of each step and idle while the host waits for "
            f"the next batch ({f.stall_fraction:.0%} of the step)", fix,
        ))
    if f.contention >= 0.05:
        out.append(Finding(
            "host-contention", "warning",
            f"the training process waited {f.contention:.0%} of each step for a CPU core while "
            "taking the next batch: the host is oversubscribed (other jobs, or more loader "
            "workers than cores), so it is not counted as a data stall",
            "give the trainer its cores: fewer workers (min(cores/gpus, 8)), other jobs off "
            "the machine, or pin processes (taskset / numactl)",
        ))
    workers = int(f.loader.get("num_workers") or 0)
    if f.step_contention >= STEP_CONTENTION:
        threads = f.loader.get("torch_threads")
        who = (f"torch's {threads} intra-op thread{'s' if threads != 1 else ''}, " if threads
               else "")
        advice = set_threads_advice(threads, f.cores, workers)
        set_threads = f"{advice} in the training script (the cores the workers leave), " if advice else ""
        out.append(Finding(
            "step-contention", "warning",
            f"the training thread waited {f.step_contention:.0%} of its step body for a CPU "
            f"core: the step's compute shares the {f.cores} cores with {who}{workers} loader "
            f"worker{'s' if workers != 1 else ''} and other jobs, so the step is slower than its work",
            f"{set_threads}fewer workers, or other jobs off the machine",
        ))
    rebuilt = int(f.loader.get("instances") or 1) > 1
    if (not f.loader.get("feedline") and workers > 0
            and (rebuilt or not f.loader.get("persistent_workers"))
            and f.epoch_starts and f.step_p50 > 0
            and f.epoch_start_wait > max(3 * f.wait_p50, 0.25 * f.step_p50)):
        waited = f"{f.epoch_start_wait * 1e3:.0f} ms (median of {f.epoch_starts})"
        if rebuilt:
            message = (f"the DataLoader is built again {f.loader['instances'] - 1} time(s) at the "
                       f"same line (each epoch), and each new one starts its {workers} worker "
                       f"processes: the first batch of an epoch waited {waited} against "
                       f"{f.wait_p50 * 1e3:.1f} ms for the others")
            fix = ("build it once, before the epoch loop, with DataLoader(..., "
                   "persistent_workers=True); change what an epoch draws through its sampler "
                   "(or a Subset's indices) instead of a new loader")
        elif f.steps_per_pass < 2:
            message = (f"a new iterator every step (next(iter(loader))) starts the {workers} "
                       f"worker processes again: each step's batch waited {waited}")
            fix = ("make the iterator once before the loop (it = iter(loader); next(it) in each "
                   "step), or DataLoader(..., persistent_workers=True)")
        else:
            message = (f"each epoch starts its {workers} worker processes again: the first batch "
                       f"of an epoch waited {waited} against {f.wait_p50 * 1e3:.1f} ms for the others")
            fix = "keep the workers between epochs: DataLoader(..., persistent_workers=True)"
        out.append(Finding("epoch-restarts", "warning", message, fix))
    phases = _passes_differ(f)
    if phases is not None:
        out.append(phases)  # the long waits are one pass's, not a tail of slow batches
    elif f.step_p50 > 0 and f.wait_p99 > 0.5 * f.step_p50 and f.wait_p50 < 0.2 * f.step_p50:
        out.append(Finding(
            "tail-stalls", "warning",
            f"the wait for data is short at the median ({f.wait_p50 * 1e3:.1f} ms) but "
            f"{f.wait_p99 * 1e3:.1f} ms at p99: a few slow batches stall the run although "
            "the mean looks fine",
            f"{_prefetch_fix(f)}, and find the slow samples (feedline diagnose --trace "
            "shows them)",
        ))
    return out


PHASE_GAP = 0.4
"""Difference of two passes' stall fractions above which the passes are told apart."""


def _passes_differ(f: RunFacts) -> Finding | None:
    """Passes (epochs) that wait for data very differently: the first reads from storage
    and later ones from a cache (the dataset's own, or the page cache), or the reverse."""
    st = f.pass_stalls
    if len(st) < 2 or max(st) - min(st) < PHASE_GAP:
        return None
    each = ", ".join(f"{k + 1}: {x:.0%}" for k, x in enumerate(st))
    first, later = st[0], sum(st[1:]) / len(st[1:])
    if first - later >= PHASE_GAP:
        message = (f"the first pass over the data waited {first:.0%} of its time for data "
                   f"(data-bound), later passes {later:.0%} ("
                   f"{'compute-bound' if later < 0.2 else 'less'}): the data is cached after the "
                   f"first pass (in the dataset, or the page cache). Stall by pass: {each}")
        fix = ("a long run is mostly later passes: judge it by them; to shorten the first, "
               "read ahead with more workers or warm the cache before training")
    else:
        message = (f"passes over the data wait for it very differently (stall by pass: {each}): "
                   "the data path changes between epochs (a cache evicted, storage slowing "
                   "down, or a dataset that grows)")
        fix = "open the trace (--trace) at the slow pass and compare its fetch times"
    return Finding("passes-differ", "warning", message, fix)


def _long_steps_rule(f: RunFacts) -> list[Finding]:
    if f.long is None:
        return []
    periodic = f.long.every is not None
    return [Finding(
        "long-steps", "warning",
        f"{f.long.said()}: " + (
            "periodic work in the loop (a checkpoint save, logging, evaluation), not data"
            if periodic else "not data: a slow phase (warm-up, caches) or occasional work in the "
            "loop"),
        ("make it rarer or take it off the training thread (save from a background thread, "
         "torch.distributed.checkpoint.async_save; log less often); --trace shows those steps"
         if periodic else "open the trace (--trace) at those steps; if it is work in the loop "
         "(saving, logging, evaluation), make it rarer or take it off the training thread"),
    )]


def prefetch_depth(fetch_p99: float, step: float, workers: int, feedline: bool) -> int:
    """Batches to keep ready so one slow batch (``fetch_p99`` seconds) does not stall.

    While one worker spends ``fetch_p99`` on a slow batch the consumer takes a
    batch every ``step`` seconds, so ``fetch_p99 / step`` batches must already
    be waiting. A DataLoader's ``prefetch_factor`` counts per worker (the other
    workers refill as they go); a feedline.Loader's ``prefetch`` is the total.
    """
    need = math.ceil(fetch_p99 / max(step, 1e-6) - 1e-9)
    if feedline:
        return max(2, need + 1)
    return max(2, math.ceil(need / max(workers, 1)) + 1)


def _prefetch_fix(f: RunFacts) -> str:
    w = int(f.loader.get("num_workers") or 0)
    feed = bool(f.loader.get("feedline"))
    depth = prefetch_depth(f.fetch_p99 or f.wait_p99, f.step_p50, w, feed)
    why = (f"(p99 batch preparation {(f.fetch_p99 or f.wait_p99) * 1e3:.0f} ms against a "
           f"{f.step_p50 * 1e3:.0f} ms step)")
    name = "prefetch" if feed else "prefetch_factor"
    now = f.loader.get(name)
    if not isinstance(now, int) or isinstance(now, bool):
        now = None if feed else 2  # a DataLoader's default
    if w > 0 and now is not None and depth <= now:
        return (f"the prefetch depth already covers the slowest batches ({name}={now}; {why[1:-1]}): "
                "the long waits come from elsewhere; open the trace (--trace) at those steps")
    if feed:
        return f"deepen the prefetch: Loader(..., prefetch={depth}) {why}"
    if w == 0:
        return (f"prepare batches ahead: DataLoader(..., num_workers={max(1, f.workers_rec)}, "
                f"prefetch_factor={depth}) {why}")
    return f"deepen the prefetch: DataLoader(..., prefetch_factor={depth}) {why}"


def _topology_rules(f: RunFacts) -> list[Finding]:
    """Seed 000 (decode on the GPU) and seed 001 Q1 (workers on the GPU's NUMA node)."""
    out: list[Finding] = []
    if (f.device_type == "cuda" and f.binding == "decode" and f.gpu_decoder
            and f.decode_gain is not None and f.decode_gain[1] < f.decode_gain[0]):
        now, then = f.decode_gain
        out.append(Finding(
            "decode-on-gpu", "high" if f.verdict == "data-bound" else "warning",
            f"CPU decode binds and {f.gpu_decoder} can decode JPEGs on the GPU: the stage model "
            f"puts the step at {now * 1e3:.1f} ms now and {then * 1e3:.1f} ms with decode off "
            f"the CPU (up to {now / then:.2f}x, less the GPU's own decode time)",
            "decode on the GPU: Loader(..., decode_on=\"gpu\") (or \"auto\", which measures "
            "first); only compressed bytes then cross PCIe",
        ))
    p = f.placement
    if (f.device_type == "cuda" and p and p.get("node") is not None and p.get("process_off_node")
            and p.get("node_cpus")):
        from feedline.placement import format_cpulist

        out.append(Finding(
            "workers-off-gpu-node", "warning",
            f"this process may run only on CPUs {format_cpulist(p.get('process_cpus') or [])}, none "
            f"of them on node {p['node']} where the GPU sits: every worker's reads and copies "
            "cross the inter-socket link",
            f"run the job on node {p['node']}'s CPUs ({format_cpulist(p['node_cpus'])}): numactl "
            f"--cpunodebind={p['node']} --membind={p['node']}, or ask the scheduler for a cpuset "
            "on that node",
        ))
    elif (f.device_type == "cuda" and p and p.get("cpus") and p.get("node") is not None
            and not p.get("process_on_node")):  # confined to the node already: workers inherit it
        placed = f.loader.get("feedline") and f.loader.get("placement", "auto") != "none"
        if not placed:
            from feedline.placement import format_cpulist

            cpus = format_cpulist(p["cpus"])
            out.append(Finding(
                "workers-off-gpu-node", "warning",
                f"this host has several NUMA nodes and the GPU sits on node {p['node']}, but "
                "the loader's workers may run on any CPU: reads and copies from the other "
                "socket cross the inter-socket link",
                (f"Loader(..., placement=\"auto\") runs them on node {p['node']}"
                 if f.loader.get("feedline") else
                 f"run the job under numactl --cpunodebind={p['node']} --membind={p['node']} "
                 f"(CPUs {cpus}), or use feedline.Loader (placement='auto')"),
            ))
    return out


QUIET_SHARE = 0.4
"""Share of the run (from its first measured step) after the last delivered batch above
which that time is said."""


def _quiet_rule(f: RunFacts) -> list[Finding]:
    """The run went on long after the loaders stopped delivering: its later steps took
    batches from elsewhere (``itertools.cycle`` replaying a cached pass, batches kept in a
    list) or it did other work, none of it in the step figures."""
    span = f.quiet + f.measured
    if span <= 0 or f.quiet < QUIET_SHARE * span or f.quiet < 20 * max(f.step_p50, 0.01):
        return []
    return [Finding(
        "loader-went-quiet", "warning",
        f"no hooked loader delivered a batch in the last {f.quiet:.1f} s of the run "
        f"({f.quiet / span:.0%} of it from the first measured step on): steps there took "
        "their batches from elsewhere (itertools.cycle replays its first pass from memory, a "
        "list(loader) is reused) or the script did other work; the figures above cover only "
        "the time the loader was asked for data",
        "iterate the loader itself each epoch (for epoch ...: for batch in loader) instead of "
        "cycling or keeping its batches, or measure that part with feedline.watch(iterable)",
    )]


HANDOFF_BODY = 0.1
"""A consumer thread whose steps are under this share of its waits only hands batches on."""


def handoff(f: RunFacts) -> bool:
    """The loader is consumed off the main thread by a thread that does next to nothing
    between batches (a prefetching pool's thread handing each batch to the trainer)."""
    return (f.loader.get("consumer") == "thread" and f.wait_p50 > 0
            and f.body_p50 < HANDOFF_BODY * f.wait_p50)


def _handoff_rule(f: RunFacts) -> list[Finding]:
    if not handoff(f):
        return []
    return [Finding(
        "handoff-consumer", "warning",
        f"the loader is consumed on a thread other than the main one that spends "
        f"{f.body_p50 * 1e3:.1f} ms between batches against {f.wait_p50 * 1e3:.1f} ms waiting "
        "for each: it hands the batches on (a thread pool prefetching for the trainer), so the "
        "training step runs elsewhere, overlapped with the next fetch, and is not in these "
        "figures: the stall is the fetching thread's (an upper bound for the trainer's), and "
        "the worker count is sized without the step's time",
        "measure the trainer's side: wrap what it consumes, for batch in feedline.watch(...), "
        "or take the batches on the training thread",
    )]


def _dropped_rule(f: RunFacts) -> list[Finding]:
    """Samples the loader read and did not deliver: ``on_error="skip"``, or a
    ``collate_fn`` that filters out the ones that failed to load."""
    d = f.loader.get("dropped")
    if not d or not d.get("samples"):
        return []
    n, given = int(d["samples"]), int(d.get("given") or 0)
    share = f" ({n / given:.1%} of {given})" if given else ""
    if d.get("by") == "collate_fn":
        empty = int(d.get("empty_batches") or 0)
        what = (f"collate_fn returned {n} fewer samples than it was given{share}"
                + (f", {empty} batch(es) came out empty" if empty else "")
                + ": samples that failed to load are dropped, so those steps train on "
                "smaller batches than batch_size, and the time reading them is spent every epoch")
        find = "log which indices your dataset returns None for"
    else:
        what = (f"on_error='skip' skipped {n} bad sample(s){share}: their read and decode "
                "time is spent every epoch for nothing (loader.stats['skipped_samples'] names "
                "the last 100)")
        find = "feedline verify DIR --decode lists every undecodable sample of a packed dataset"
    return [Finding("samples-dropped", "warning", what,
                    f"repair or remove those samples ({find}) so every epoch reads only good ones")]


def detect(facts: RunFacts) -> list[Finding]:
    """Every rule that fires for ``facts``, most severe first."""
    found = _workers_rules(facts) + _copy_rules(facts) + _memory_rules(facts)
    found += _timing_rules(facts) + _topology_rules(facts) + _quiet_rule(facts)
    found += _handoff_rule(facts) + _long_steps_rule(facts) + _dropped_rule(facts)
    return sorted(found, key=lambda x: SEVERITIES.index(x.severity))


def set_threads_advice(torch_threads: object, cores: int, workers: int) -> str:
    """``torch.set_num_threads(N)`` for a step that waits for a core, N the cores the loader's
    workers leave; empty when torch already runs N threads (advising it again is no fix)."""
    left = max(1, cores - workers)
    if isinstance(torch_threads, int) and torch_threads == left:
        return ""
    return f"torch.set_num_threads({left})"
