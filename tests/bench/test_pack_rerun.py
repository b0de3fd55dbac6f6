"""Smoke test of bench/pack_rerun.py: it runs at --quick size and writes well-formed JSON."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_pack_rerun_quick_writes_results(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    cmd = [sys.executable, str(ROOT / "bench" / "pack_rerun.py"), "--quick", "--files", "120",
           "--repeat", "1", "--dir", str(tmp_path), "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "pack_rerun" and doc["params"]["files"] == 120
    assert doc["params"]["reused_every_shard"] is True
    assert [r["name"] for r in doc["rows"]] == ["read sources", "rerun (all reused)", "first pack"]
    for r in doc["rows"]:
        assert r["median_s"] > 0 and len(r["runs_s"]) == 1 and r["items"] == 120
    assert [(c["ours"], c["baseline"]) for c in doc["comparisons"]] == [
        ("rerun (all reused)", "read sources"), ("rerun (all reused)", "first pack")]
    assert all(math.isfinite(c["ratio"]) and c["ratio"] > 0 for c in doc["comparisons"])
    assert "ratio rerun (all reused) vs read sources" in proc.stdout
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # scratch data removed
