"""Smoke test of bench/read_verify.py at --quick size (no timing assertions: the
machine is shared)."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_read_verify_bench_reports_both_mixes(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("bench_read_verify",
                                                  ROOT / "bench" / "read_verify.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "r.json"
    assert module.main(["--quick", "--repeat", "1", "--samples", "80", "--json", str(out),
                        "--dir", str(tmp_path)]) == 0
    assert "ratio" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert len(doc["rows"]) == 6 and len(doc["comparisons"]) == 2
    for comp in doc["comparisons"]:
        assert comp["ratio"] > 0 and math.isfinite(comp["extra_s_per_GB"])
