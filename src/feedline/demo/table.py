"""The seed's before/after table, with this machine's measured numbers.

:class:`RunFigures` holds what one measured run reports (every number comes
from a :func:`feedline.watch` report or the run's own clock, none assumed);
:func:`comparison` pairs two runs with the speedup; :func:`render` prints it
with rich, with a warning beside it when the host was busy (:func:`host_lines`);
:func:`headline` is the short version for the HTML report; :func:`to_json`
gives the same table for machines.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:
    from feedline.demo.contention import HostLoad


@dataclass(frozen=True)
class RunFigures:
    """The measured figures of one training run (times in seconds).

    ``h2d_per_batch_s`` is ``None`` when the run's report has no H2D stage
    (nothing was copied); ``utilisation`` is the GPU busy fraction on CUDA and
    the compute fraction of the step on CPU (``utilisation_of`` says which).
    A figure the report could not measure is NaN (shown as "n/a").
    """

    name: str
    loader: str
    device: str
    steps: int
    batch_size: int
    step_p50_s: float
    step_p95_s: float
    stall_fraction: float
    utilisation: float
    utilisation_of: str
    samples_per_s: float
    h2d_per_batch_s: float | None
    verdict: str
    binding: str | None
    findings: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    first_loss: float = math.nan
    last_loss: float = math.nan


def _finding(finding: Any) -> str:
    message, fix = getattr(finding, "message", None), getattr(finding, "fix", None)
    if message is None:
        return str(finding)
    return f"{message} (fix: {fix})" if fix else str(message)


def _h2d_per_batch(report: Any) -> float | None:
    # stages["h2d"] holds one entry per copy (many per batch on CUDA); the
    # analysis holds observe's per-batch figure, the one the verdict used.
    h2d = report.stages.get("h2d")
    if h2d is None or not h2d.count:
        return None
    per_batch = (report.analysis or {}).get("h2d")
    return float(per_batch) if per_batch is not None else float(h2d.total) / max(report.steps, 1)


def figures_from_report(
    report: Any, *, name: str, loader: str, device: str, steps: int, batch_size: int,
    wall_s: float, losses: list[float],
) -> RunFigures:
    """Read a :func:`feedline.watch` report into :class:`RunFigures`.

    Uses ``report.step_time`` (p50, p95), ``stall_fraction``, ``samples_per_s``,
    ``gpu_utilisation``, the H2D time per batch (``analysis["h2d"]``, only when
    ``stages`` has an ``"h2d"`` stage), ``verdict``, ``binding`` and ``findings``.
    """
    util, rate = report.gpu_utilisation, report.samples_per_s
    return RunFigures(
        name=name,
        loader=loader,
        device=device,
        steps=steps,
        batch_size=batch_size,
        step_p50_s=float(report.step_time.p50),
        step_p95_s=float(report.step_time.p95),
        stall_fraction=float(report.stall_fraction),
        utilisation=math.nan if util is None else float(util),
        utilisation_of="GPU" if device.startswith("cuda") else "compute",
        samples_per_s=math.nan if rate is None else float(rate),
        h2d_per_batch_s=_h2d_per_batch(report),
        verdict=str(report.verdict),
        binding=None if report.binding is None else str(report.binding),
        findings=[_finding(f) for f in report.findings],
        wall_s=wall_s,
        first_loss=losses[0] if losses else math.nan,
        last_loss=losses[-1] if losses else math.nan,
    )


@dataclass(frozen=True)
class Comparison:
    """Two runs of the same training, before and after, and what changed."""

    before: RunFigures
    after: RunFigures

    @property
    def speedup(self) -> float:
        """Samples/s after over samples/s before (NaN if before is zero)."""
        if not self.before.samples_per_s > 0:
            return math.nan
        return self.after.samples_per_s / self.before.samples_per_s

    @property
    def step_speedup(self) -> float:
        """Step time p50 before over after (NaN if after is zero)."""
        if self.after.step_p50_s <= 0:
            return math.nan
        return self.before.step_p50_s / self.after.step_p50_s


def comparison(before: RunFigures, after: RunFigures) -> Comparison:
    """Pair two runs; raises ``ValueError`` if they differ in steps or batch size."""
    if (before.steps, before.batch_size) != (after.steps, after.batch_size):
        raise ValueError(
            "before and after must train the same steps and batch size, got "
            f"{before.steps}x{before.batch_size} and {after.steps}x{after.batch_size}"
        )
    return Comparison(before, after)


def _ms(seconds: float | None) -> str:
    return "n/a (no copy)" if seconds is None else f"{seconds * 1e3:.2f} ms"


def _pct(fraction: float) -> str:
    if math.isnan(fraction):
        return "n/a"
    # a share of time is never below zero; clock noise can make a tiny one negative
    return f"{max(0.0, fraction) * 100:.0f}%"


def _ratio(before: float | None, after: float | None, *, higher_is_better: bool) -> str:
    if before is None or after is None or before <= 0 or after <= 0:
        return ""
    ratio = after / before if higher_is_better else before / after
    return f"{ratio:.2f}x"


def _rows(c: Comparison) -> list[tuple[str, str, str, str]]:
    b, a = c.before, c.after
    util = f"{b.utilisation_of} utilisation"
    return [
        ("step time p50", _ms(b.step_p50_s), _ms(a.step_p50_s),
         _ratio(b.step_p50_s, a.step_p50_s, higher_is_better=False)),
        ("step time p95", _ms(b.step_p95_s), _ms(a.step_p95_s),
         _ratio(b.step_p95_s, a.step_p95_s, higher_is_better=False)),
        ("data-stall fraction", _pct(b.stall_fraction), _pct(a.stall_fraction), ""),
        (util, _pct(b.utilisation), _pct(a.utilisation), ""),
        ("samples/s", f"{b.samples_per_s:.1f}", f"{a.samples_per_s:.1f}", f"{c.speedup:.2f}x"),
        ("H2D time per batch", _ms(b.h2d_per_batch_s), _ms(a.h2d_per_batch_s), ""),
        ("verdict", _verdict(b), _verdict(a), ""),
        ("loss (first -> last)", _loss(b), _loss(a), ""),
    ]


def _verdict(r: RunFigures) -> str:
    if not r.binding:
        return r.verdict
    # observe names the compute stage "gpu"; on a cpu run that compute is the CPU's
    binding = "compute" if r.binding == "gpu" and r.utilisation_of != "GPU" else r.binding
    return f"{r.verdict} ({binding})"


def _loss(r: RunFigures) -> str:
    return f"{r.first_loss:.4f} -> {r.last_loss:.4f}"


def host_lines(loads: Mapping[str, HostLoad]) -> list[str]:
    """What the host's load did to the comparison, one plain line each (none if quiet)."""
    busy = {name: load for name, load in loads.items() if load.contended}
    if not busy:
        return []
    lines = [f"busy host during the {name} run: " + "; ".join(load.reasons)
             for name, load in busy.items()]
    cores = next(iter(busy.values())).cores
    lines.append(f"so the speedup measures the competition for {cores} core(s) as much as the "
                 "loaders: rerun on a quiet machine, or with more cores (feedline doctor "
                 "checks cores against workers)")
    return lines


def headline(c: Comparison, loads: Mapping[str, HostLoad] | None = None) -> list[str]:
    """The result in two plain lines (the HTML report's top), plus any busy-host warning."""
    b, a = c.before, c.after
    trust = " (on a busy host: not representative)" if host_lines(loads or {}) else ""
    return [
        f"Speedup {c.speedup:.2f}x{trust}: {b.samples_per_s:.1f} -> {a.samples_per_s:.1f} "
        f"samples/s over {b.steps} steps x batch {b.batch_size} on {b.device}",
        f"Data stall {_pct(b.stall_fraction)} -> {_pct(a.stall_fraction)} of each step; "
        f"step time p50 {_ms(b.step_p50_s)} -> {_ms(a.step_p50_s)}",
        *host_lines(loads or {}),
    ]


def render(
    c: Comparison, console: Console | None = None, loads: Mapping[str, HostLoad] | None = None,
) -> None:
    """Print the before/after table, any busy-host warning beside it, and the speedup line."""
    console = console or Console()
    warning = host_lines(loads or {})
    b, a = c.before, c.after
    table = Table(
        title=f"{b.steps} steps x batch {b.batch_size} on {b.device}: same model init, same data",
        title_justify="left",
        caption=f"{b.name}: {b.loader}\n{a.name}: {a.loader}",
        caption_justify="left",
    )
    table.add_column("metric")
    table.add_column(b.name, justify="right")
    table.add_column(a.name, justify="right")
    table.add_column("change", justify="right")
    for row in _rows(c):
        table.add_row(*row)
    console.print(table)
    for line in warning:
        console.print(f"[bold yellow]{escape(line)}[/]")
    label = "measured on a busy host, not representative" if warning else "measured"
    console.print(
        f"speedup (samples/s, {label}): [bold]{c.speedup:.2f}x[/bold]; "
        f"wall time {b.wall_s:.1f} s -> {a.wall_s:.1f} s"
    )
    for line in notes(c):
        console.print(line, highlight=False)


def notes(c: Comparison) -> list[str]:
    """What the measurements say, in words: verdicts, the first findings, caveats."""
    lines = []
    for r in (c.before, c.after):
        lines.append(f"{r.name}: {_verdict(r)}, {_pct(r.stall_fraction)} of each step waiting for data")
        lines += [f"  - {f}" for f in r.findings[:2]]
    if not c.before.device.startswith("cuda"):
        after = ("made no copy" if c.after.h2d_per_batch_s is None
                 else "timed its hand-over of each batch, done by a loader thread, not the step")
        lines.append("note: on cpu nothing crosses PCIe; the before run's H2D is its .to('cpu') "
                     f"call, feedline's loader {after}")
    return lines


def to_json(c: Comparison, **extra: Any) -> dict[str, Any]:
    """The table for machines: ``{"before", "after", "speedup", "step_speedup", ...}``.

    Non-finite floats become ``None`` so the result is strict JSON.
    """
    def clean(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    return clean({
        "before": asdict(c.before),
        "after": asdict(c.after),
        "speedup": c.speedup,
        "step_speedup": c.step_speedup,
        **extra,
    })
