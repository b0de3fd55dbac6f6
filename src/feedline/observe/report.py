"""The report of one measured run: stage percentiles, stall, verdict, model, findings.

:func:`build_report` turns :class:`Measurements` (what a watch or a diagnose
run collected) into a :class:`Report`. The verdict comes from what was
measured (the stall fraction, and the data path's own time against the
compute step); the analysis applies ``feedline.model.analyze`` to the measured
per-batch stage times; the predicted gain is the model's step time after the
recommended change against the measured step time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from feedline.model.analytic import analyze
from feedline.observe._stats import EMPTY_STATS, Span, StageStats, summarize
from feedline.observe.findings import Finding, RunFacts, detect, recommended_workers

VERDICTS = ("data-bound", "compute-bound", "balanced")
DATA_BOUND_STALL = 0.25
COMPUTE_BOUND_STALL = 0.15
BALANCED_RATIO = 0.7


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
    copy_times: list[float] = field(default_factory=list)
    blocking_copy_s: float = 0.0
    """Total time of copies that block the step (pageable, or without non_blocking)."""
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

    def to_dict(self, include_spans: bool = False) -> dict[str, Any]:
        """A JSON-able dict (spans only with ``include_spans``: they can be large)."""
        out = {
            "name": self.name, "device": self.device, "steps": self.steps,
            "stages": {k: v.to_dict() for k, v in self.stages.items()},
            "step_time": self.step_time.to_dict(), "stall_fraction": self.stall_fraction,
            "samples_per_s": self.samples_per_s, "gpu_utilisation": self.gpu_utilisation,
            "verdict": self.verdict, "binding": self.binding, "analysis": self.analysis,
            "findings": [f.to_dict() for f in self.findings],
            "predicted_gain": self.predicted_gain, "recommendation": self.recommendation,
            "host": self.host, "loader": self.loader, "copies": self.copies, "ab": self.ab,
            "timeline": self.timeline,
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
        )


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


def _per_batch(m: Measurements, steps: int) -> dict[str, float]:
    """Mean per-batch read / decode / h2d / gpu seconds, and where they came from."""
    by: dict[str, list[float]] = {}
    cpu_in_fetch = 0.0
    # Leave out the warm-up (worker start, first fetch) as the step statistics do.
    t_from = m.step_starts[m.warmup] if len(m.step_starts) > m.warmup else float("-inf")
    window = [s for s in m.spans if s.start >= t_from]
    if not any(s.stage in ("fetch", "collate") for s in window):
        window = m.spans
    # Fetches on the training thread carry a sampled run-queue delay (see
    # RUNQ_EVERY): the unsampled ones get the sampled fetches' delay per second.
    sampled = [s for s in window if s.stage == "fetch" and "runq" in s.attrs]
    sampled_wall = sum(s.duration for s in sampled)
    runq_rate = sum(float(s.attrs["runq"]) for s in sampled) / sampled_wall if sampled_wall > 0 else 0.0
    for s in window:
        by.setdefault(s.stage, []).append(s.duration)
        if s.stage == "fetch":
            runq = float(s.attrs["runq"]) if "runq" in s.attrs else runq_rate * s.duration
            cpu_in_fetch += cpu_demand(s.duration, float(s.attrs.get("cpu", 0.0)), runq)
    n = len(by.get("fetch") or by.get("collate") or []) or max(steps, 1)
    fetch = sum(by.get("fetch", []))
    read = (sum(by.get("read", [])) + max(0.0, fetch - cpu_in_fetch)) / n
    decode = (sum(by.get("decode", [])) + sum(by.get("transform", [])) + sum(by.get("collate", []))
              + min(cpu_in_fetch, fetch)) / n
    measured = bool(fetch or by.get("read") or by.get("decode") or by.get("collate"))
    h2d = sum(m.copy_times) / max(steps, 1) if m.copy_times else sum(by.get("h2d", [])) / n
    gpu_src = m.gpu[m.warmup:] or m.gpu
    gpu = sum(gpu_src) / len(gpu_src) if gpu_src else 0.0
    if m.device_type == "cuda":
        gpu = max(0.0, gpu - h2d)  # copies on the compute stream sit inside the body events
    if not measured:  # an opaque iterable: all we know of the data path is the wait
        wait = m.wait[m.warmup:] or m.wait
        read = sum(wait) / len(wait) if wait else 0.0
    return {"read": read, "decode": decode, "h2d": h2d, "gpu": gpu, "stages_measured": measured}


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


def _recommend(m: Measurements, pb: dict[str, float], verdict: str, measured_step: float,
               w_rec: int) -> tuple[str, float | None]:
    workers = int(m.loader.get("num_workers") or 0)
    r, d, h, g = pb["read"], pb["decode"], pb["h2d"], pb["gpu"]
    if verdict == "compute-bound":
        return ("the data path keeps up; speed up the step itself (mixed precision, larger "
                "batch, fused kernels)"), 1.0
    if "num_workers" in m.loader and (workers == 0 or workers < w_rec):
        after = analyze(r, d, h, g, workers=w_rec).steady
        rec = f"num_workers={w_rec} with pin_memory=True, persistent_workers=True"
        return rec, (measured_step / after if after > 0 else None)
    if h >= max((r + d) / max(workers, 1), g):
        after = analyze(r, d, 0.0, g, workers=max(workers, 1)).steady
        return ("pin host memory and copy with non_blocking=True on a copy stream "
                "(feedline.Loader)"), (measured_step / after if after > 0 else None)
    target = analyze(r, d, h, g, workers=max(workers, 1))
    return (f"the data path needs {target.workers_needed} workers' worth of read+decode; cut "
            "per-sample cost (pack small files into shards, cheaper decode) or use "
            "feedline.Loader"), None


def _facts(m: Measurements, verdict: str, stall: float, util: float | None,
           step: StageStats, wait: StageStats, w_rec: int) -> RunFacts:
    return RunFacts(
        device_type=m.device_type, verdict=verdict, stall_fraction=stall,
        gpu_utilisation=util, step_p50=step.p50, wait_p50=wait.p50, wait_p99=wait.p99,
        loader=m.loader, copies=m.copies, batch_bytes=m.batch_bytes, cores=m.cores,
        gpus=m.gpus, shm_free=m.shm_free, pinned_series=m.pinned_series, workers_rec=w_rec,
    )


def _stage_table(m: Measurements, wait: list[float], body: list[float],
                 gpu: list[float]) -> dict[str, StageStats]:
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
    """Summarise, analyse and judge one run. See the module docstring."""
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
    runq = sum(m.wait_runq[k:len(m.wait)]) if in_workers else 0.0
    stall_s = sum(wait) - runq + m.blocking_copy_s * (len(iters) / max(len(m.wait), 1))
    stall = min(1.0, stall_s / sum(iters)) if iters and sum(iters) > 0 else 0.0
    pb = _per_batch(m, len(m.wait))
    workers = int(m.loader.get("num_workers") or 0)
    data_time = (pb["read"] + pb["decode"]) / max(workers, 1)
    verdict = _verdict(stall, max(data_time, pb["h2d"]), pb["gpu"], m.ab)
    gpu_busy = pb["gpu"] * len(iters)
    util = min(1.0, gpu_busy / sum(iters)) if iters and sum(iters) > 0 else None
    an = analyze(pb["read"], pb["decode"], pb["h2d"], pb["gpu"], workers=max(workers, 1))
    serial_loader = ("num_workers" in m.loader and workers == 0) or not pb["stages_measured"]
    predicted = an.serial if serial_loader else an.steady
    analysis = an.to_dict() | {
        "predicted": predicted, "measured": step.mean,
        "error": (predicted - step.mean) / step.mean if step.mean > 0 else None,
        "applies": "serial" if serial_loader else "steady",
        "stages_measured": bool(pb["stages_measured"]),
    }
    if verdict == "data-bound":
        cands = {"read": pb["read"], "decode": pb["decode"], "h2d": pb["h2d"]}
        binding = max(cands, key=lambda n: cands[n]) if pb["stages_measured"] else "wait"
    elif verdict == "compute-bound":
        binding = "gpu"
    else:
        binding = "gpu" if pb["gpu"] >= max(data_time, pb["h2d"]) else an.binding
    w_rec = max(1, min(an.workers_needed or 1, recommended_workers(m.cores, m.gpus)))
    rec, gain = _recommend(m, pb, verdict, step.mean, w_rec)
    queued = m.wait_runq[k:len(m.wait)] if in_workers else []
    queued = queued + [0.0] * max(0, len(wait) - len(queued))
    data_wait = summarize(max(0.0, a - b) for a, b in zip(wait, queued, strict=False))
    facts = _facts(m, verdict, stall, util, step, data_wait, w_rec)
    facts.contention = runq / sum(iters) if iters and sum(iters) > 0 else 0.0
    findings = detect(facts)
    starts = m.step_starts[k:]
    return Report(
        name=m.name, device=m.device_type, steps=len(iters),
        stages=_stage_table(m, wait, body, m.gpu[k:]), step_time=step,
        stall_fraction=stall,
        samples_per_s=(m.batch_samples / step.mean) if m.batch_samples and step.mean else None,
        gpu_utilisation=util, verdict=verdict, binding=binding, analysis=analysis,
        findings=findings, predicted_gain=gain, recommendation=rec,
        host=m.host | {"wait_cpu_queue_fraction": round(facts.contention, 4)},
        loader=m.loader, copies=m.copies, ab=m.ab,
        timeline=[[t, a, b] for t, a, b in zip(starts, wait, body, strict=False)], spans=m.spans,
    )
