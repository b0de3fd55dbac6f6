"""Smoke test of ``bench/w1_gap.py --quick``: runs tiny, writes every variant's figures
(no timing assertions: the machine is shared)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_w1_gap_quick(tmp_path: Path) -> None:
    out = tmp_path / "gap.json"
    subprocess.run([sys.executable, str(ROOT / "bench" / "w1_gap.py"), "--quick", "--rounds", "1",
                    "--json", str(out)], check=True, capture_output=True, timeout=170)
    doc = json.loads(out.read_text())
    assert doc["images"] == 320 and doc["rounds"] == 1
    rows = doc["us_per_image"]
    assert set(rows) == {"bare decode -> one reused array", "bare decode -> slot rows",
                         "read_fields alone", "raw preadv alone", "label gather alone",
                         "loader part (fill_rows)"}
    assert all(r["median"] > 0 for r in rows.values())
    assert rows["bare decode -> one reused array"]["of_bare"] == 1.0
