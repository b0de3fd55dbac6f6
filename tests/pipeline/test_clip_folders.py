"""Video clips stored as frames (``clip_0001/frame_000.jpg ...``), packed with the folder
key rule: one sample per clip, each frame a field decoded straight into its batch rows;
stacking the frame fields gives the clip tensor a DataLoader over the folders would."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import simplejpeg
import torch

import feedline
from feedline.format import SourceRules, pack

FRAMES = 4


def _clips(root: Path, n: int) -> None:
    rng = np.random.default_rng(0)
    for c in range(n):
        for f in range(FRAMES):
            path = root / f"clip_{c:03d}" / f"frame_{f:03d}.jpg"
            path.parent.mkdir(parents=True, exist_ok=True)
            img = (rng.integers(0, 8, (24, 32, 3), dtype=np.uint8) * 32)
            path.write_bytes(simplejpeg.encode_jpeg(img, quality=90))


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_a_clip_folder_is_one_sample_of_frame_fields(tmp_path: Path, worker_type: str) -> None:
    _clips(tmp_path / "clips", 10)
    pack([tmp_path / "clips"], tmp_path / "ds", rules=SourceRules(key="folder"))
    names = [f"frame_{f:03d}.jpg" for f in range(FRAMES)]
    seen = 0
    with feedline.Loader(os.fspath(tmp_path / "ds"), batch_size=4, workers=2, worker_type=worker_type,
                         seed=0, drop_last=False) as loader:
        for batch in loader:
            clips = torch.stack([batch[n] for n in names], 1)  # [B, T, H, W, 3]
            assert clips.shape[1:] == (FRAMES, 24, 32, 3)
            for key, clip in zip(batch["__key__"], clips, strict=True):
                want = np.stack([simplejpeg.decode_jpeg((tmp_path / "clips" / key / n).read_bytes())
                                 for n in names])
                assert np.array_equal(clip.numpy(), want)
                seen += 1
        assert set(loader.stats["recipes"].values()) == {"decode-rows"}
    assert seen == 10
