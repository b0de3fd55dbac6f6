"""Smoke test of bench/pack_vs_tar.py: it runs at --quick size and writes well-formed JSON."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_pack_vs_tar_quick_writes_results(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    cmd = [sys.executable, str(ROOT / "bench" / "pack_vs_tar.py"), "--quick", "--files", "120",
           "--repeat", "1", "--dir", str(tmp_path), "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "pack_vs_tar" and doc["params"]["files"] == 120
    names = {r["name"] for r in doc["rows"]}
    assert {"tar cf", "tar cf + sync", "pack (API)", "pack (API, no fsync)", "feedline pack (CLI)"} <= names
    for r in doc["rows"]:
        assert r["median_s"] > 0 and len(r["runs_s"]) == 1 and r["items"] == 120
        assert r["cpu_median_s"] >= 0
    for c in doc["comparisons"]:
        assert c["baseline"] in ("tar cf", "tar cf + sync") and math.isfinite(c["ratio"]) and c["ratio"] > 0
    assert "ratio pack (API) vs tar cf" in proc.stdout
    assert "ratio pack (API, no fsync) vs tar cf:" in proc.stdout and "ratio pack (API) vs tar cf + sync" in proc.stdout
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # scratch data removed
