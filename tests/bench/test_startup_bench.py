"""Smoke test of bench/startup.py at its --quick size: every contender runs in its own
process and delivers its first batch twice, the CLI rows are measured. No timing
assertions (the machine is shared)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_startup_quick(tmp_path: Path) -> None:
    out = tmp_path / "startup.json"
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "startup.py"), "--quick", "--json", str(out)],
                         capture_output=True, text=True, timeout=280)
    assert run.returncode == 0, run.stderr[-3000:]
    res = json.loads(out.read_text())
    rows = {r["contender"]: r for r in res["loaders"]}
    assert set(rows) == {"Loader", "Loader(map)", "Loader(fork)", "wrap", "DataLoader"}
    assert {r["samples"] for r in rows.values()} == {64}
    assert rows["DataLoader"]["ratio_cpu"] == 1.0
    assert {c["command"] for c in res["cli"]} == {"--help", "--version", "diagnose -- python -c pass"}
    assert all(c["cpu_s"] > 0 for c in res["cli"])
