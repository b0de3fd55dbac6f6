"""Measure where a training step's time goes: stage spans, verdicts, reports.

Public API: :func:`watch` (measure any loader from the training loop),
:class:`Report` / :class:`StageStats` / :class:`Finding` (the results),
:func:`render_text`, :func:`write_html`, :func:`write_trace` (outputs), and the
stage-span hook (:func:`span`, :func:`emit`, :func:`install`, ...). Nothing here
imports torch until a watch starts.
"""

from feedline.observe._export import render_text, write_trace
from feedline.observe._stats import StageStats, summarize
from feedline.observe.findings import Finding
from feedline.observe.report import Report
from feedline.observe.report_html import write_html  # matplotlib loads only when called
from feedline.observe.watch import Watch, watch
from feedline.spans import STAGE_NAMES, active, emit, install, span, uninstall

__all__ = [
    "STAGE_NAMES",
    "Finding",
    "Report",
    "StageStats",
    "Watch",
    "active",
    "emit",
    "install",
    "render_text",
    "span",
    "summarize",
    "uninstall",
    "watch",
    "write_html",
    "write_trace",
]
