"""GPU-machine check: JPEGs decoded straight into reused pinned slots arrive intact.

Collected only with FEEDLINE_GPU=1 (bench/gpu_check.py runs ``pytest tests/gpu``).
Fails, never skips, without CUDA. A pinned budget of two slots forces slot reuse
while ten batches are held, so a slot decoded into before its copy finished
shows up as wrong pixels.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import simplejpeg
import torch

import feedline


def test_jpeg_batches_on_cuda_match_decode_and_stack(tmp_path: Path) -> None:
    assert torch.cuda.is_available(), "this test needs a CUDA device (run it on the GPU box)"
    from feedline.format import pack

    src = tmp_path / "src"
    src.mkdir()
    for i in range(80):
        img = np.random.default_rng(i).integers(0, 255, (48, 64, 3), dtype=np.uint8)
        (src / f"s{i:04d}.jpg").write_bytes(simplejpeg.encode_jpeg(img, quality=85))
        (src / f"s{i:04d}.cls").write_text(str(i))
    pack([os.fspath(src)], os.fspath(tmp_path / "ds"))
    ds = feedline.open_dataset(tmp_path / "ds")
    slot = 8 * (48 * 64 * 3 + 8)
    with feedline.Loader(os.fspath(tmp_path / "ds"), batch_size=8, device="cuda:0", workers=4,
                         pinned_budget=2 * slot, seed=3) as loader:
        held = list(loader)
        torch.cuda.synchronize()
        assert len(held) == 10
        for batch in held:
            ids = batch["cls"].tolist()
            want = np.stack([simplejpeg.decode_jpeg(bytes(ds[i]["jpg"]), colorspace="RGB")
                             for i in ids])
            assert batch["jpg"].device.type == "cuda"
            assert batch["jpg"].cpu().numpy().tobytes() == want.tobytes()
        assert loader.stats["pinned_peak_bytes"] <= 2 * slot
