"""GPU-machine check: raw fields read straight into reused pinned slots arrive intact.

Collected only with FEEDLINE_GPU=1 (bench/gpu_check.py runs ``pytest tests/gpu``).
Fails, never skips, without CUDA. Raw ``.f32`` samples take the slot-read path
(one pread per sample into the pinned row); a budget of two slots forces reuse
while twenty batches are held, so a row read before its copy finished shows up as
a wrong value. Thread and process workers both.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

import feedline


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_raw_batches_on_cuda_equal_the_samples(tmp_path: Path, worker_type: str) -> None:
    assert torch.cuda.is_available(), "this test needs a CUDA device (run it on the GPU box)"
    from feedline.format import pack

    src = tmp_path / "src"
    src.mkdir()
    for i in range(160):
        (src / f"s{i:04d}.x.f32").write_bytes(np.full(256, i, np.float32).tobytes())
        (src / f"s{i:04d}.i.i64").write_bytes(np.array([i, -i], np.int64).tobytes())
    pack([os.fspath(src)], os.fspath(tmp_path / "ds"))
    slot = 8 * (256 * 4 + 16)
    with feedline.Loader(os.fspath(tmp_path / "ds"), batch_size=8, device="cuda:0", workers=2,
                         worker_type=worker_type, pinned_budget=2 * slot, seed=5) as loader:
        held = list(loader)
        torch.cuda.synchronize()
        assert loader.stats["recipes"] == {"x.f32": "read-rows", "i.i64": "gather"}  # 16 bytes: a column
        assert len(held) == 20
        seen = []
        for batch in held:
            ids = [int(k[1:]) for k in batch["__key__"]]
            seen += ids
            assert batch["x.f32"].device.type == "cuda"
            x, i = batch["x.f32"].cpu(), batch["i.i64"].cpu()
            assert torch.equal(x, torch.tensor(ids, dtype=torch.float32)[:, None].expand(8, 256))
            assert i[:, 0].tolist() == ids and i[:, 1].tolist() == [-k for k in ids]
        assert sorted(seen) == list(range(160))
        assert loader.stats["pinned_peak_bytes"] <= 2 * slot
