"""GPU checks of ``feedline demo`` (collected only with FEEDLINE_GPU=1; fail without CUDA)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from feedline.demo import DemoConfig, SynthConfig, _parts, run_demo
from feedline.demo.align import misaligned
from feedline.demo.model import CAMERA_FIELDS
from feedline.demo.runs import pick_device
from feedline.demo.synth import make_driving_log

TINY = SynthConfig(frames=24, width=64, height=48, lidar_points=(20, 200))


def test_loader_on_cuda_delivers_aligned_device_batches(tmp_path: Path) -> None:
    device = pick_device("cuda")  # DeviceError (a failure) without CUDA
    make_driving_log(TINY, tmp_path / "raw")
    _parts.pack(tmp_path / "raw", tmp_path / "packed", shard_size=1 << 20, workers=2)
    loader = _parts.feedline_loader(tmp_path / "packed", batch_size=4, device=device,
                                    workers=2, seed=0)
    held = []
    for batch in loader:
        assert batch[CAMERA_FIELDS[0]].device.type == "cuda"
        assert all(s.device.type == "cuda" for s in batch["lidar.npy"])
        held.append(batch)
    torch.cuda.synchronize()
    assert len(held) == TINY.frames // 4
    for batch in held:  # batches held across the epoch are intact and aligned
        assert misaligned(batch) == []


@pytest.mark.timeout(600)
def test_demo_on_cuda_measures_both_runs(tmp_path: Path) -> None:
    pick_device("cuda")
    cfg = DemoConfig(synth=TINY, steps=5, batch_size=4, device="cuda", out=tmp_path / "w",
                     json_path=tmp_path / "demo.json", html_path=tmp_path / "demo.html")
    result = run_demo(cfg)
    data = json.loads((tmp_path / "demo.json").read_text())
    assert data == json.loads(json.dumps(result.table))
    assert data["device"] == "cuda" and math.isfinite(data["speedup"])
    assert data["before"]["utilisation_of"] == "GPU"
    assert data["before"]["h2d_per_batch_s"] is not None  # the naive run's .to(cuda) copies
    assert (tmp_path / "demo.html").stat().st_size > 0
