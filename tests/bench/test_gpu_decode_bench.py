"""bench/gpu_decode.py runs its CPU rows at a tiny size and writes its JSON (GPU rows on the GPU box)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_gpu_decode_quick_on_cpu(tmp_path):
    out = tmp_path / "gd.json"
    run = subprocess.run([sys.executable, "bench/gpu_decode.py", "--device", "cpu", "--quick",
                          "--repeat", "1", "--json", str(out)], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    rows = json.loads(out.read_text())["rows"]
    cpu = [r for r in rows if "cpu decode" in r["name"]]
    assert len(cpu) == 2 and all(r["images_per_s"] > 0 for r in cpu)
    assert all("no CUDA" in r["skipped"] for r in rows if "gpu decode" in r["name"])
    # compressed bytes are what a GPU decode sends over PCIe: fewer than the decoded pixels
    assert "compressed" in run.stdout
