"""Self-contained HTML report: timeline picture, per-stage histograms, tables.

One or several reports side by side (the demo compares a "before" and an
"after" run). Pictures are matplotlib PNGs embedded as base64 ``<img>``, so
the file opens anywhere with no other files. matplotlib loads on first use.
"""

from __future__ import annotations

import base64
import html
import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from feedline.observe._export import ordered_stages, stage_label
from feedline.observe.report import Report
from feedline.units import format_duration

COLOURS = {"wait": "#d62728", "read": "#ff7f0e", "fetch": "#ff7f0e", "decode": "#bcbd22",
           "transform": "#8c564b", "collate": "#9467bd", "pin": "#e377c2", "h2d": "#17becf",
           "step": "#2ca02c", "gpu": "#1f77b4"}


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as e:  # pragma: no cover - matplotlib is a dependency
        raise ImportError("write_html needs matplotlib: pip install matplotlib") from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    _pyplot().close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def timeline_window(rep: Report, max_seconds: float = 3.0) -> str:
    """Which part of the run the timeline shows: ``"first 3 s of 12.4 s"`` or ``"all 2.1 s"``."""
    starts = [s.start for s in rep.spans]
    t0 = rep.timeline[0][0] if rep.timeline else min(starts, default=0.0)
    total = max((s.start + s.duration for s in rep.spans), default=t0) - t0
    if total <= max_seconds:
        return f"all {format_duration(total)}"
    return f"first {format_duration(max_seconds)} of {format_duration(total)}"


def timeline_png(rep: Report, max_seconds: float = 3.0) -> str:
    """Spans of the first ``max_seconds`` of measured steps, one row per stage and thread.

    The title says which window is shown ("first 3.0 s of 12.4 s", or "all 2.1 s").
    Spans of one row alternate between the stage's colour and a lighter shade, so steps
    that follow each other with no gap (a compute-bound run) stay apart, not one solid bar.
    """
    plt = _pyplot()
    spans = rep.spans
    t0 = min((s.start for s in spans), default=0.0)
    if rep.timeline:
        t0 = rep.timeline[0][0]
    window = [s for s in spans if t0 <= s.start <= t0 + max_seconds]
    shown = timeline_window(rep, max_seconds)
    rows = sorted({(s.stage, s.pid, s.tid) for s in window},
                  key=lambda r: (ordered_stages_index(r[0]), r[1], r[2]))
    fig, ax = plt.subplots(figsize=(10, 0.35 * max(len(rows), 3) + 1))
    for y, (stage, pid, tid) in enumerate(rows):
        bars = [((s.start - t0) * 1e3, s.duration * 1e3) for s in window
                if (s.stage, s.pid, s.tid) == (stage, pid, tid)]
        colour = COLOURS.get(stage, "#7f7f7f")
        shades = (colour, _lighter(colour))
        ax.broken_barh(bars, (y - 0.4, 0.8), facecolors=[shades[i % 2] for i in range(len(bars))])
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{stage_label(st, rep.device)} [{pid}:{tid % 10000}]"
                        for st, pid, tid in rows], fontsize=9)
    ax.invert_yaxis()  # pipeline order top to bottom
    ax.set_xlabel("ms since first measured step", fontsize=10)
    ax.set_title(f"{rep.name}: timeline, {shown} of measured steps", fontsize=11)
    return _png(fig)


def _lighter(colour: str, amount: float = 0.45) -> str:
    """``colour`` (``#rrggbb``) mixed with white: the shade of every other span in a row."""
    rgb = [int(colour[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + (255 - c) * amount):02x}" for c in rgb)


def ordered_stages_index(stage: str) -> int:
    order = ("wait", "read", "fetch", "decode", "transform", "collate", "pin", "h2d", "step", "gpu")
    return order.index(stage) if stage in order else len(order)


def histograms_png(rep: Report) -> str:
    """One histogram of durations (ms) per stage, with p50 / p99 marked; three per row,
    so labels stay readable however many stages there are."""
    plt = _pyplot()
    names = [n for n in ordered_stages(rep) if any(s.stage == n for s in rep.spans)] or ["wait"]
    cols = min(3, len(names))
    nrows = -(-len(names) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.6 * cols, 2.9 * nrows), squeeze=False)
    for ax in axes.flat[len(names):]:
        ax.set_visible(False)
    for ax, name in zip(axes.flat, names, strict=False):
        data = [s.duration * 1e3 for s in rep.spans if s.stage == name]
        ax.hist(data or [0.0], bins=30, color=COLOURS.get(name, "#7f7f7f"))
        st = rep.stages.get(name)
        if st is not None:
            ax.axvline(st.p50 * 1e3, color="k", linestyle="--", linewidth=1)
            ax.axvline(st.p99 * 1e3, color="k", linestyle=":", linewidth=1)
        ax.set_title(stage_label(name, rep.device), fontsize=12)
        ax.tick_params(labelsize=10)
        ax.set_xlabel("ms (-- p50, .. p99)", fontsize=10)
    fig.tight_layout()
    return _png(fig)


def _table(rep: Report) -> str:
    head = "".join(f"<th>{h}</th>" for h in ("stage", "count", "mean", "p50", "p95", "p99", "max"))
    rows = []
    for name in ordered_stages(rep):
        s = rep.stages[name]
        cells = "".join(f"<td>{v * 1e3:.2f}</td>" for v in (s.mean, s.p50, s.p95, s.p99, s.max))
        label = html.escape(stage_label(name, rep.device))
        rows.append(f"<tr><td>{label}</td><td>{s.count}</td>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table><p class=unit>times in ms</p>"


def _loaders(rep: Report) -> str:
    """One row per other loader (validation, say): its share of the run and its advice."""
    if not rep.loaders:
        return ""
    e = html.escape
    head = "".join(f"<th>{h}</th>" for h in ("loader", "type", "share of wall time", "steps",
                                              "waits for data", "wait p99 ms", "advice"))
    rows = "".join(
        f"<tr><td>{e(o['label'])}</td><td>{e(str(o['config'].get('type', '?')))}</td>"
        f"<td>{o['share_of_wall']:.0%}</td><td>{o['steps']}</td><td>{o['stall_fraction']:.0%}</td>"
        f"<td>{o['wait']['p99'] * 1e3:.1f}</td><td style='text-align:left'>{e(o['advice'])}</td></tr>"
        for o in rep.loaders)
    return f"<h3>Other loaders</h3><table class=loaders><tr>{head}</tr>{rows}</table>"


def _section(rep: Report) -> str:
    e = html.escape
    util = "n/a" if rep.gpu_utilisation is None else f"{rep.gpu_utilisation:.0%}"
    busy = "GPU busy" if str(rep.device).startswith("cuda") else "compute busy"
    a = rep.analysis
    model = (f"<p>Model ({e(str(a.get('applies')))}): serial {a['serial'] * 1e3:.1f} ms, steady "
             f"{a['steady'] * 1e3:.1f} ms; predicted {a['predicted'] * 1e3:.1f} ms vs measured "
             f"{a['measured'] * 1e3:.1f} ms.</p>") if a else ""
    gain = "" if rep.predicted_gain is None else f" Predicted gain: <b>{rep.predicted_gain:.2f}x</b>."
    ab = (f"<p>Synthetic batch ({e(str(rep.ab.get('statistic', 'mean')))} step): "
          f"{rep.ab['with_data_path'] * 1e3:.1f} ms with the data path, "
          f"{rep.ab['without_data_path'] * 1e3:.1f} ms without.</p>") if rep.ab else ""
    why = (f"<p class=unknown>Why {e(rep.binding)}: {e(rep.reason)}<br><i>Fix:</i> "
           f"{e(rep.fix)}</p>") if rep.reason else ""
    label = rep.loader.get("label")
    train = (f"<p>Training loader: <b>{e(str(label))}</b> ({e(str(rep.loader.get('type', '?')))}, "
             "not run inside another loader's pass nor only under no_grad, with the most "
             "steps).</p>") if label else ""
    finds = "".join(f"<li><b>[{e(f.severity)}] {e(f.code)}</b>: {e(f.message)}<br><i>Fix:</i> "
                    f"<code>{e(f.fix)}</code></li>" for f in rep.findings)
    return (
        f"<section><h2>{e(rep.name)}</h2>"
        f"<p class=verdict>Verdict: <b>{e(rep.verdict)}</b> (binding stage: "
        f"{e(stage_label(str(rep.binding), rep.device))}). Data stall "
        f"{max(0.0, rep.stall_fraction):.0%} of each step; {busy} {util}; step p50 "
        f"{rep.step_time.p50 * 1e3:.1f} ms, p99 {rep.step_time.p99 * 1e3:.1f} ms.</p>"
        f"{why}{train}{model}<p>Recommendation: {e(rep.recommendation)}.{gain}</p>{ab}"
        f"<ul class=findings>{finds}</ul>{_table(rep)}{_loaders(rep)}"
        f"<img alt='timeline of {e(rep.name)}' src='data:image/png;base64,{timeline_png(rep)}'>"
        f"<p class=unit>Timeline: {e(timeline_window(rep))} of measured steps.</p>"
        f"<img alt='stage histograms of {e(rep.name)}' "
        f"src='data:image/png;base64,{histograms_png(rep)}'></section>"
    )


CSS = ("body{font-family:sans-serif;margin:1em}main{display:flex;gap:2em;flex-wrap:wrap}"
       "section{flex:1;min-width:520px}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
       "padding:2px 6px;text-align:right}img{max-width:100%;display:block;margin:.5em 0}"
       ".verdict{font-size:1.2em}.headline{font-size:1.3em;border:1px solid #ccc;padding:.2em 1em;"
       "margin-bottom:1em}")


def write_html(reports: Report | Sequence[Report], path: str | os.PathLike[str],
               title: str = "feedline diagnose", headline: Sequence[str] = ()) -> Path:
    """Write one self-contained HTML page with every report side by side.

    ``headline``: plain-text lines shown first, above the reports (the result
    in a sentence, e.g. the demo's speedup and samples/s); the first is bold.
    """
    reps = [reports] if isinstance(reports, Report) else list(reports)
    if not reps:
        raise ValueError("reports must hold at least one Report")
    lines = [f"<p>{'<b>' * (i == 0)}{html.escape(t)}{'</b>' * (i == 0)}</p>"
             for i, t in enumerate(headline)]
    body = (f"<div class=headline>{''.join(lines)}</div>" if lines else "") + (
        f"<main>{''.join(_section(r) for r in reps)}</main>")
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
            f"</title><style>{CSS}</style></head><body><h1>{html.escape(title)}</h1>"
            f"{body}</body></html>")
    out = Path(path)
    out.write_text(page, encoding="utf-8")
    return out
