"""Smoke test of bench/diagnose_overhead.py: it runs and writes well-formed results.

The bench's own part (a loop with and without ``feedline.watch``) runs in this
interpreter, which has torch imported already (a child of its own cost 2 s of CPU
importing it again); the scripts it times, plain and under ``feedline diagnose``,
are real processes as always."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "diagnose_overhead.py"


# SLOW_ONLY: a bench smoke run (9 s in CI); diagnose's per-step hooks are timed by no default
# test (a timed assertion is not a test), their output by tests/observe and tests/scenarios
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_quick_run_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("diagnose_overhead_bench", SCRIPT)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "o.json"
    threads = torch.get_num_threads()
    try:
        bench.main(["--quick", "--repeat", "2", "--json", str(out)])
    finally:
        torch.set_num_threads(threads)  # the bench runs on one thread, as a training step would
    stdout = capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["repeat"] == 2 and len(data["baseline"]["runs"]) == 2
    assert data["baseline"]["median_step_s"] > 0 and data["watched"]["median_step_s"] > 0
    pairs = [w / b for w, b in zip(data["watched"]["runs"], data["baseline"]["runs"], strict=True)]
    assert data["ratio"] == pytest.approx(sum(pairs) / 2)  # the median of two pairs
    assert data["ratio_of_medians"] == data["watched"]["median_step_s"] / data["baseline"]["median_step_s"]
    assert "overhead" in stdout
    diag = data["diagnose"]  # the same step as a script, plain and under feedline diagnose
    assert diag["repeat"] == 1 and len(diag["diagnosed"]["runs"]) == 1
    assert diag["baseline"]["median_step_s"] >= 0.004  # the 5 ms step, timed by the script
    assert "feedline diagnose" in stdout
