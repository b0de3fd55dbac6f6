"""Report outputs without heavy dependencies: Chrome/Perfetto trace JSON and terminal text."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from feedline.observe._stats import Recorder, Span
from feedline.observe.report import Report


def trace_events(groups: Sequence[tuple[str, Sequence[Span]]]) -> list[dict[str, Any]]:
    """Chrome trace "X" events (microseconds from the earliest span), one process per run/pid."""
    starts = [s.start for _, spans in groups for s in spans]
    base = min(starts) if starts else 0.0
    events: list[dict[str, Any]] = []
    for index, (name, spans) in enumerate(groups):
        pids: dict[int, int] = {}
        for s in spans:
            pid = pids.setdefault(s.pid, index * 1_000_000 + s.pid % 1_000_000)
            events.append({
                "name": s.stage, "cat": "feedline", "ph": "X",
                "ts": round((s.start - base) * 1e6, 3), "dur": round(max(s.duration, 0.0) * 1e6, 3),
                "pid": pid, "tid": s.tid % 2**31,
                "args": {k: v for k, v in s.attrs.items() if isinstance(v, (int, float, str, bool))},
            })
        for real, pid in pids.items():
            events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                           "args": {"name": f"{name} (pid {real})"}})
    return events


def write_trace(source: Report | Recorder | Sequence[Report], path: str | os.PathLike[str]) -> Path:
    """Write every stage span as a Chrome/Perfetto trace (``{"traceEvents": [...]}``).

    ``source`` is one report, several (one process group each), or a live
    :class:`Recorder`. Open the file in ui.perfetto.dev or chrome://tracing.
    """
    if isinstance(source, Recorder):
        groups: list[tuple[str, Sequence[Span]]] = [("run", source.spans())]
    elif isinstance(source, Report):
        groups = [(source.name, source.spans)]
    else:
        groups = [(r.name, r.spans) for r in source]
    out = Path(path)
    out.write_text(json.dumps({"traceEvents": trace_events(groups), "displayTimeUnit": "ms"}),
                   encoding="utf-8")
    return out


def _ms(x: float) -> str:
    return f"{x * 1e3:.2f}"


STAGE_ORDER = ("wait", "read", "fetch", "decode", "transform", "collate", "pin", "h2d", "step", "gpu")


def ordered_stages(rep: Report) -> list[str]:
    """Stage names in pipeline order, unknown ones last."""
    known = [s for s in STAGE_ORDER if s in rep.stages]
    return known + sorted(s for s in rep.stages if s not in STAGE_ORDER)


def stage_label(stage: str, device: str) -> str:
    """The name shown for ``stage``: the compute stage is "gpu" only on a GPU."""
    return "compute" if stage == "gpu" and not str(device).startswith("cuda") else stage


def per_batch_line(rep: Report) -> str:
    """The model's per-batch cost of each stage, when the table does not show them as such
    (a fetch or a dataset's item code is one span, split into blocked ``read`` and CPU
    ``decode``): without it the binding stage may be a name no table row has."""
    per = (rep.analysis or {}).get("per_batch") or {}
    shown = {k: v for k, v in per.items() if isinstance(v, (int, float)) and v > 0}
    if not shown or all(k in rep.stages for k in shown):
        return ""
    costs = ", ".join(f"{stage_label(k, rep.device)} {_ms(v)} ms" for k, v in shown.items())
    draws = rep.loader.get("draws_per_step")
    unit = f"per step ({draws:g} batches)" if draws else "per batch"
    return f"{unit} (read = time blocked, decode = CPU time of the data code): {costs}"


def render_text(rep: Report, width: int = 100) -> str:
    """The report as terminal text (rich tables): stages, verdict, model, findings."""
    from rich.console import Console
    from rich.table import Table

    buf = io.StringIO()
    con = Console(file=buf, width=width, force_terminal=False, color_system=None)
    table = Table(title=f"feedline diagnose: {rep.name} ({rep.device}, {rep.steps} steps)")
    for col in ("stage", "count", "mean ms", "p50 ms", "p95 ms", "p99 ms", "max ms"):
        table.add_column(col, justify="left" if col == "stage" else "right")
    for name in ordered_stages(rep):
        s = rep.stages[name]
        table.add_row(stage_label(name, rep.device), str(s.count), _ms(s.mean), _ms(s.p50),
                      _ms(s.p95), _ms(s.p99), _ms(s.max))
    st = rep.step_time
    table.add_row("STEP (wait+body)", str(st.count), _ms(st.mean), _ms(st.p50), _ms(st.p95),
                  _ms(st.p99), _ms(st.max))
    con.print(table)
    util = "n/a" if rep.gpu_utilisation is None else f"{rep.gpu_utilisation:.0%}"
    sps = "n/a" if rep.samples_per_s is None else f"{rep.samples_per_s:,.0f}"
    label = rep.loader.get("label")
    if label:
        zipped = rep.loader.get("zipped_with")
        how = (f"stepped in lockstep with {', '.join(zipped)}, whose waits each step also "
               "pays; the one that waits most" if zipped else
               "not run inside another loader's pass nor only under no_grad, with the most "
               + ("time in its passes (more than twice the loader with the most steps)"
                  if rep.loader.get("chosen_for") == "time" else "steps"))
        built = int(rep.loader.get("instances") or 1)
        if built > 1:
            how += f"; built {built} times at the same place in the code, one data path"
        continued = int(rep.loader.get("continues") or 0)
        if continued:
            how += (f"; {continued} later DataLoader(s) over the same dataset object went on "
                    "with its training (a resumed epoch's loader, then the usual one): one "
                    "data path, the settings the last one had")
        draws = rep.loader.get("draws_per_step")
        if draws:
            how += (f"; {draws:g} batches taken per step (next() calls between two updates), "
                    "so a step is those batches and the figures per batch are per step")
        con.print(f"training loader: {label} ({rep.loader.get('type', '?')}, {how})")
        q = rep.loader.get("queue")
        if q:
            occ = "n/a" if q.get("occupancy") is None else f"{q['occupancy']:.0%}"
            con.print(f"queue: window {occ} full when the loop asked (empty for "
                      f"{q['starved_batches']} of {q['batches']} batches); {q['budget_waits']} "
                      f"waits on the pinned budget ({q['budget_wait_s']:.3f} s)", markup=False)
    binding = stage_label(str(rep.binding), rep.device)
    # a stall counted inside the step (thread workers holding the GIL or the cores while
    # the step runs) overlaps the busy time: say so, or the two read as a contradiction
    inside = (" (part of it inside the step: see why)" if rep.gpu_utilisation is not None
              and rep.stall_fraction + rep.gpu_utilisation > 1.05 else "")
    con.print(f"verdict: {rep.verdict.upper()} (binding: {binding})  data stall: "
              f"{rep.stall_fraction:.0%} of each step{inside}  busy: {util}  samples/s: {sps}")
    if rep.reason:
        con.print(f"why {binding if rep.verdict != 'unknown' else 'unknown'}: {rep.reason}\n"
                  f"    fix: {rep.fix}", markup=False)
    a = rep.analysis
    if a:
        con.print(f"model ({a.get('applies')}): serial {_ms(a['serial'])} ms, steady "
                  f"{_ms(a['steady'])} ms, predicted {_ms(a['predicted'])} ms vs measured "
                  f"{_ms(a['measured'])} ms")
        split = per_batch_line(rep)
        if split:
            con.print(split, markup=False)
    gain = "" if rep.predicted_gain is None else f" (predicted gain {rep.predicted_gain:.2f}x)"
    con.print(f"recommendation: {rep.recommendation}{gain}")
    if rep.ab:
        con.print(f"synthetic-batch check ({rep.ab.get('statistic', 'mean')} step, as the table): "
                  f"{_ms(rep.ab['with_data_path'])} ms with the data path, "
                  f"{_ms(rep.ab['without_data_path'])} ms without ({rep.ab['steps']} replayed steps)")
    for other in rep.loaders:
        w = other["wait"]
        kind = "lockstep training loader" if other.get("role") == "lockstep" else "other loader"
        what = other["config"].get("type", "?")
        if other["config"].get("nested_in"):
            where = ("after its training passes" if other["config"].get("after_training")
                     else "inside its own pass")
            what += f": no_grad passes of {other['config']['nested_in']} {where}"
        con.print(f"{kind} {other['label']} ({what}): "
                  f"{other['share_of_wall']:.0%} of the run's wall time, {other['steps']} steps "
                  f"in {other['passes']} pass(es), waits for data {other['stall_fraction']:.0%} "
                  f"of its time (wait p50 {_ms(w['p50'])} ms, p99 {_ms(w['p99'])} ms)\n"
                  f"    advice: {other['advice']}", markup=False)
    for f in rep.findings:
        con.print(f"[{f.severity}] {f.code}: {f.message}\n    fix: {f.fix}", markup=False)
    h = rep.host
    for note in h.get("notes", []):
        con.print(f"note: {note}", markup=False)
    if h.get("samples", 0) > 1:
        con.print(f"host: CPU {h.get('cpu_mean_pct')}% mean, busiest core {h.get('cpu_max_core_pct')}%, "
                  f"{h.get('ctx_switches_per_s')} ctx switches/s, disk read {h.get('disk_read_mb_s')} MB/s"
                  + (f", GPU SM {h['gpu_sm_pct']}%, PCIe RX {h.get('pcie_rx_mb_s')} MB/s"
                     if "gpu_sm_pct" in h else ""))
    return buf.getvalue()
