"""Smoke test of bench/hook_cost.py: it runs both regimes and writes well-formed results."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "hook_cost.py"


@pytest.mark.timeout(60)
def test_quick_run_writes_both_regimes(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("hook_cost_bench", SCRIPT)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "o.json"
    threads = torch.get_num_threads()
    try:
        bench.main(["--quick", "--sleep-ms", "1", "--json", str(out)])
    finally:
        torch.set_num_threads(threads)
    data = json.loads(out.read_text())
    for regime in ("warm", "cold"):
        r = data[regime]
        assert set(r["hooks_us"]) == {"next", "forward", "backward", "optimizer"}
        assert r["plain_step_us"] > 0
        assert r["hooks_total_us"] == pytest.approx(sum(r["hooks_us"].values()))
    assert data["cold"]["sleep_ms"] == 1.0 and data["warm"]["sleep_ms"] == 0.0
