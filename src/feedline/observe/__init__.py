"""Measure where a training step's time goes: stage spans, verdicts, reports."""

from feedline.observe.spans import STAGE_NAMES, active, emit, install, span, uninstall

__all__ = ["STAGE_NAMES", "active", "emit", "install", "span", "uninstall"]
