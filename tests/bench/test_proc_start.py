"""Smoke test of bench/proc_start.py at its --quick size: each contender runs in its own
process, delivers every sample, and the forked loader says it forked (the forkserver one
that it did not). No timing assertions (the machine is shared)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_proc_start_quick(tmp_path: Path) -> None:
    out = tmp_path / "start.json"
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "proc_start.py"), "--quick", "--rounds", "1",
                          "--shapes", "folder", "--json", str(out)], capture_output=True, text=True, timeout=580)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = {r["contender"]: r for r in json.loads(out.read_text())}
    assert set(rows) == {"forkserver", "fork", "thread", "DataLoader"}
    assert len({r["samples"] for r in rows.values()}) == 1  # every contender, every sample
    assert rows["fork"]["used"] == ["fork"] and rows["forkserver"]["used"] == ["forkserver"]
    assert rows["forkserver"]["ctx_bytes"] > 0 and rows["DataLoader"]["epoch_ratio"] == 1.0
