"""``feedline model``: the stage model and the simulator from the command line.

``feedline model --read 12ms --decode 8ms --h2d 5ms --gpu 20ms`` prints the
seed's analysis (serial 45 ms, steady 20 ms, GPU utilisation 44.4% -> 100%,
speedup 2.25x). ``--simulate`` (implied by any ``--*-dist`` or
``--target-stall``) replays the stage times through the discrete-event
simulator and prints the step-time tail.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from feedline.cli._examples import epilog
from feedline.cli._output import check_json_dest, json_option, to_stdout, write_json
from feedline.errors import ConfigError
from feedline.units import format_duration as fmt_time

if TYPE_CHECKING:
    from feedline.model import PipelineAnalysis, Plan, SimulationResult

_MAX_PREFETCH = 8
_STAGE_HELP = "per-batch {} time, with a unit: us, ms or s (e.g. 12ms)"
_DIST_HELP = (
    "{} time distribution for --simulate: const, lognormal:sigma=0.8 (median = the "
    "stage time), lognormal:sigma=0.8,mean=15ms, or empirical:times.json[,unit=ms]"
)


def fmt_pct(fraction: float) -> str:
    """``0.4444 -> "44.4%"``, ``1.0 -> "100%"``."""
    text = f"{fraction * 100:.1f}"
    return (text[:-2] if text.endswith(".0") else text) + "%"


def _parse_fraction(text: str) -> float:
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        value = float("nan")
    if not 0 <= value <= 1:
        raise ConfigError(
            f"--target-stall: cannot use {text!r}", fix="give a share such as 5% or 0.05"
        )
    return value


def analysis_lines(a: PipelineAnalysis) -> list[str]:
    """The human report of :func:`feedline.model.analyze` (one string per line)."""
    lines = [
        f"stages       read {fmt_time(a.read)}, decode {fmt_time(a.decode)}, "
        f"h2d {fmt_time(a.h2d)}, gpu {fmt_time(a.gpu)}; {a.workers} worker(s)",
        f"serial       {fmt_time(a.serial)} per step (nothing overlaps)",
        f"steady       {fmt_time(a.steady)} per step "
        f"= max((read + decode) / {a.workers}, h2d, gpu)",
        f"GPU util     {fmt_pct(a.utilisation_serial)} -> {fmt_pct(a.utilisation_pipelined)}",
        f"speedup      {a.speedup:.2f}x",
        f"binding      {a.binding}" + ("" if a.data_bound else " (the data path is hidden)"),
    ]
    if a.workers_needed is None:
        lines.append("workers      none suffice: the GPU step is 0, nothing can hide behind it")
    else:
        lines.append(
            f"workers      {a.workers_needed} needed to hide read + decode behind the GPU step"
        )
    if a.binding == "h2d":
        lines.append("note         copy-bound: more workers will not help; shrink or compress batches")
    elif a.data_bound and a.workers_needed is not None and a.workers < a.workers_needed:
        lines.append(f"note         data-bound: raise --workers to {a.workers_needed}")
    return lines


def simulation_lines(r: SimulationResult, stages: dict[str, str]) -> list[str]:
    """The human report of :func:`feedline.model.simulate`."""
    return [
        f"simulated    {r.steps} steps (after {r.warmup} warm-up), {r.workers} worker(s), "
        f"prefetch {r.prefetch}, {r.device_buffers} device buffers",
        "stages       " + ", ".join(f"{k} {v}" for k, v in stages.items()),
        f"step p50     {fmt_time(r.step_p50)}",
        f"step p95     {fmt_time(r.step_p95)}",
        f"step p99     {fmt_time(r.step_p99)}",
        f"step mean    {fmt_time(r.step_mean)} (analytic on the means: "
        f"{fmt_time(r.analytic_steady)}; worst step {fmt_time(r.step_max)})",
        f"GPU busy     {fmt_pct(r.gpu_busy)}",
        f"data stall   {fmt_pct(r.data_stall)} of wall time; "
        f"p99 step stalls {fmt_pct(r.stall_p99)} of its time",
    ]


def plan_lines(plan: Plan | None, target: float, max_workers: int, max_prefetch: int) -> list[str]:
    """The planner's answer, or why there is none."""
    if plan is None:
        return [
            f"plan         nothing up to {max_workers} workers x prefetch {max_prefetch} keeps "
            f"stall under {fmt_pct(target)} (copy-bound, or a tail too heavy to buffer)"
        ]
    return [
        f"plan         {plan.workers} worker(s), prefetch {plan.prefetch}: fewest keeping "
        f"p99 and mean stall under {fmt_pct(target)} (p99 step {fmt_time(plan.result.step_p99)}, "
        f"stall {fmt_pct(plan.result.data_stall)})"
    ]


def _simulation_section(
    times: dict[str, float],
    specs: dict[str, str],
    *,
    workers: int,
    prefetch: int,
    device_buffers: int,
    steps: int,
    seed: int,
    target_stall: str | None,
    max_workers: int,
) -> tuple[dict[str, Any], list[str]]:
    """Run the simulator (and the planner when asked); return JSON parts and text lines."""
    from feedline import model as m

    dists = {k: m.parse_dist(specs[k], times[k], stage=k) for k in times}
    described = {k: d.describe() for k, d in dists.items()}
    stages = (dists["read"], dists["decode"], dists["h2d"], dists["gpu"])
    result = m.simulate(
        *stages, workers=workers, prefetch=prefetch, device_buffers=device_buffers,
        steps=steps, seed=seed,
    )
    out: dict[str, Any] = {"simulation": {**result.to_dict(), "stages": described}}
    lines = simulation_lines(result, described)
    if target_stall is not None:
        target = _parse_fraction(target_stall)
        plan = m.plan_pipeline(
            *stages, max_stall=target, max_workers=max_workers, max_prefetch=_MAX_PREFETCH,
            device_buffers=device_buffers, steps=min(steps, 5_000), seed=seed,
        )
        out["plan"] = plan.to_dict() if plan else None
        lines += plan_lines(plan, target, max_workers, _MAX_PREFETCH)
    return out, lines


def model(
    read: Annotated[str | None, typer.Option(help=_STAGE_HELP.format("read") + " [required]")] = None,
    decode: Annotated[str | None, typer.Option(help=_STAGE_HELP.format("decode") + " [required]")] = None,
    h2d: Annotated[str | None, typer.Option(help=_STAGE_HELP.format("host-to-device copy") + " [required]")] = None,
    gpu: Annotated[str | None, typer.Option(help=_STAGE_HELP.format("GPU step") + " [required]")] = None,
    workers: Annotated[int, typer.Option(help="loader workers sharing read + decode (>= 1)")] = 1,
    simulate: Annotated[bool, typer.Option("--simulate", help="also run the discrete-event simulator")] = False,
    steps: Annotated[int, typer.Option(help="simulated steps (>= 1)")] = 10_000,
    prefetch: Annotated[int, typer.Option(help="batches each worker may have outstanding (>= 1)")] = 2,
    device_buffers: Annotated[int, typer.Option(help="device batch slots, 2 = double buffering (>= 1)")] = 2,
    seed: Annotated[int, typer.Option(help="RNG seed of the simulation")] = 0,
    read_dist: Annotated[str, typer.Option(help=_DIST_HELP.format("read"))] = "const",
    decode_dist: Annotated[str, typer.Option(help=_DIST_HELP.format("decode"))] = "const",
    h2d_dist: Annotated[str, typer.Option(help=_DIST_HELP.format("h2d"))] = "const",
    gpu_dist: Annotated[str, typer.Option(help=_DIST_HELP.format("gpu"))] = "const",
    target_stall: Annotated[
        str | None,
        typer.Option(help="find the fewest workers and prefetch keeping p99 stall under this share (5% or 0.05)"),
    ] = None,
    max_workers: Annotated[int, typer.Option(help="upper bound of the --target-stall search")] = 32,
    json_dest: Annotated[str | None, json_option()] = None,
) -> None:
    """Predict step time, GPU utilisation and the binding stage from per-stage times."""
    from feedline import model as m
    from feedline.model.simulate import MAX_STEPS
    from feedline.units import parse_duration

    given = {"read": read, "decode": decode, "h2d": h2d, "gpu": gpu}
    missing = [f"--{k}" for k, v in given.items() if v is None]
    if missing:
        raise ConfigError(
            f"missing {', '.join(missing)}", fix="give all four stage times, e.g. --read 12ms"
        )
    times = {k: parse_duration(str(v), name=f"--{k}", unit_required=True) for k, v in given.items()}
    check_json_dest(json_dest)
    for name, value in (
        ("--workers", workers), ("--steps", steps), ("--prefetch", prefetch),
        ("--device-buffers", device_buffers), ("--max-workers", max_workers),
    ):
        if value < 1:
            raise ConfigError(f"{name} must be >= 1, got {value}")
        if value > MAX_STEPS and name != "--max-workers":  # was a traceback (74 GiB for 10**10 steps)
            raise ConfigError(f"{name} must be at most {MAX_STEPS:,}, got {value:,}", field=name,
                              fix="the simulator keeps every step in memory (1 million steps: about 320 MB)")
    if seed < 0:  # was a traceback from numpy's SeedSequence
        raise ConfigError(f"--seed must be >= 0, got {seed}", field="--seed")
    analysis = m.analyze(**times, workers=workers)
    specs = {"read": read_dist, "decode": decode_dist, "h2d": h2d_dist, "gpu": gpu_dist}
    out: dict[str, Any] = {"analytic": {**analysis.to_dict(), "data_bound": analysis.data_bound}}
    lines = analysis_lines(analysis)
    if simulate or target_stall is not None or any(v != "const" for v in specs.values()):
        sim_out, sim_lines = _simulation_section(
            times, specs, workers=workers, prefetch=prefetch, device_buffers=device_buffers,
            steps=steps, seed=seed, target_stall=target_stall, max_workers=max_workers,
        )
        out.update(sim_out)
        lines += ["", *sim_lines]
    write_json(out, json_dest)
    if not to_stdout(json_dest):
        typer.echo("\n".join(lines))


def register(app: typer.Typer) -> None:
    """Add ``feedline model`` to ``app``."""
    app.command("model", epilog=epilog("model"))(model)
