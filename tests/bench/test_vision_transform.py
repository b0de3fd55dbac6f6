"""Smoke test of bench/vision_transform.py: it runs and writes well-formed results."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "vision_transform.py"


@pytest.mark.timeout(120)
def test_quick_run_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "v.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--repeat", "3", "--json", str(out)],
                          capture_output=True, text=True, timeout=110, check=False)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    runs, med = data["runs_us_per_image"], data["median_us_per_image"]
    assert data["repeat"] == 3 and all(len(v) == 3 for v in runs.values())
    assert med == {k: statistics.median(v) for k, v in runs.items()}
    assert data["ratio_vision_over_pillow"] == med["feedline.vision"] / med["pillow"]
    assert data["max_mean_abs_diff_normalised"] < 0.1  # both compute the same picture
    assert "ratio feedline.vision / pillow" in proc.stdout
    small = data["small_on_threads"]
    assert small["us_per_image_one_thread"] > 0 and small["two_thread_speedup"] > 0
    assert "two threads at once" in proc.stdout
