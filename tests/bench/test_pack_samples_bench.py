"""Smoke test of bench/pack_samples.py: the SQLite source (stdlib) at a tiny size writes well-formed JSON."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(180)
def test_pack_samples_bench_quick_writes_results(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    cmd = [sys.executable, str(ROOT / "bench" / "pack_samples.py"), "--quick", "--sources", "sqlite",
           "--samples", "640", "--repeat", "1", "--dir", str(tmp_path), "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=170)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "pack_samples" and doc["params"]["checked_sqlite"] == 128
    assert [r["name"] for r in doc["rows"]] == [
        "sqlite Loader(threads)", "sqlite Loader(processes)", "sqlite DataLoader(num_workers=2)"]
    assert all(r["items"] == 128 and r["median_s"] > 0 for r in doc["rows"])
    assert all(math.isfinite(c["ratio"]) and c["ratio"] > 0 for c in doc["comparisons"])
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # scratch data removed
