"""Smoke tests of the bench/read_*.py benchmarks: they run at --quick size and
write well-formed results. No timing assertions (the machine is shared)."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(script: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str, dict[str, Any]]:
    """Run the script's main() in this process (saves a torch import per run); (rc, out, err, json)."""
    spec = importlib.util.spec_from_file_location(f"bench_{script[:-3]}", ROOT / "bench" / script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "result.json"
    out.unlink(missing_ok=True)
    rc = module.main(["--quick", "--repeat", "1", "--json", str(out), "--dir", str(tmp_path), *extra])
    captured = capsys.readouterr()
    doc = json.loads(out.read_text()) if out.exists() else {}
    return rc, captured.out, captured.err, doc


def _check_rows(doc: dict[str, Any]) -> None:
    assert doc["preliminary"] is True and doc["quick"] is True
    assert doc["rows"], doc
    for row in doc["rows"]:
        assert row["median_s"] > 0 and math.isfinite(row["MBps"]) and row["bytes"] > 0
        assert len(row["runs_s"]) == 1
    names = {r["name"] for r in doc["rows"]}
    for comp in doc["comparisons"]:
        assert comp["ours"] in names and comp["baseline"] in names
        assert comp["ratio"] > 0 and comp["meets_goal"] == (comp["ratio"] >= comp["goal"])


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("script", "extra", "comparisons"),
    [
        ("read_sequential.py", ("--samples", "60"), {1, 2}),
        ("read_small_files.py", ("--samples", "300"), {2}),
        ("read_vs_webdataset.py", ("--samples", "150"), {1}),
        ("read_npy_rows.py", ("--samples", "300"), {2}),
    ],
)
def test_read_benchmark_runs_and_reports(
    script: str, extra: tuple[str, ...], comparisons: set[int], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, err, doc = _run(script, tmp_path, capsys, *extra)
    assert rc == 0, err
    assert "ratio" in out
    _check_rows(doc)
    # read_sequential has two comparisons where O_DIRECT works, one plus a reason where not
    assert len(doc["comparisons"]) + len(doc["skipped"]) in comparisons | {2}
    assert len(doc["comparisons"]) in comparisons
    for skip in doc["skipped"]:
        assert skip["reason"]


@pytest.mark.timeout(300)
def test_read_gds_cpu_smoke_and_cuda_fails_loudly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err, doc = _run("read_gds.py", tmp_path, capsys, "--device", "cpu", "--samples", "40")
    assert rc == 0, err
    _check_rows(doc)
    assert doc["skipped"] and "gds_status" in doc["params"]
    import torch

    if torch.cuda.is_available():  # on a GPU machine the GPU check runs the real thing
        return
    rc, _, err, doc = _run("read_gds.py", tmp_path, capsys, "--device", "cuda")
    assert rc == 2
    assert "CUDA" in err and "CUDA" in doc["error"]
