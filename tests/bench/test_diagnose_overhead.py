"""Smoke test of bench/diagnose_overhead.py: it runs and writes well-formed results."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "diagnose_overhead.py"


@pytest.mark.timeout(240)
def test_quick_run_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "o.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--repeat", "2", "--json", str(out)],
                          capture_output=True, text=True, timeout=230, check=False)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["repeat"] == 2 and len(data["baseline"]["runs"]) == 2
    assert data["baseline"]["median_step_s"] > 0 and data["watched"]["median_step_s"] > 0
    pairs = [w / b for w, b in zip(data["watched"]["runs"], data["baseline"]["runs"], strict=True)]
    assert data["ratio"] == pytest.approx(sum(pairs) / 2)  # the median of two pairs
    assert data["ratio_of_medians"] == data["watched"]["median_step_s"] / data["baseline"]["median_step_s"]
    assert "overhead" in proc.stdout
    diag = data["diagnose"]  # the same step as a script, plain and under feedline diagnose
    assert diag["repeat"] == 1 and len(diag["diagnosed"]["runs"]) == 1
    assert diag["baseline"]["median_step_s"] >= 0.004  # the 5 ms step, timed by the script
    assert "feedline diagnose" in proc.stdout
