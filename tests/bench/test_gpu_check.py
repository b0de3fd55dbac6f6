"""The GPU check script never passes silently without CUDA."""

import json
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def test_dry_run_lists_the_plan():
    out = subprocess.run(
        [sys.executable, "bench/gpu_check.py", "--dry-run"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0
    assert "pytest tests/gpu" in out.stdout and "loader_h2d" in out.stdout


def test_without_cuda_it_fails_loudly(tmp_path):
    if torch.cuda.is_available():  # on a GPU machine the real run is the test
        return
    out = subprocess.run(
        [sys.executable, "bench/gpu_check.py", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert out.returncode == 2
    summary = json.loads((tmp_path / "gpu_check.json").read_text())
    assert summary["env"]["cuda_available"] is False and "did not run" in summary["error"]
