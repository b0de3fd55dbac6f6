from __future__ import annotations

from pathlib import Path

import pytest
import torch

from feedline.demo.align import misaligned, sample_frames
from feedline.demo.model import CAMERA_FIELDS
from feedline.demo.naive import RawDrivingLog, naive_loader
from feedline.demo.synth import SynthConfig


def test_naive_batches_are_aligned_and_ragged(tiny_raw: Path, tiny_cfg: SynthConfig) -> None:
    seen = []
    for batch in naive_loader(tiny_raw, batch_size=4, seed=1):
        assert misaligned(batch) == []
        for field in CAMERA_FIELDS:
            assert batch[field].shape == (4, tiny_cfg.height, tiny_cfg.width, 3)
            assert batch[field].dtype == torch.uint8
        assert isinstance(batch["lidar.npy"], list) and len(batch["lidar.npy"]) == 4
        assert batch["imu.npy"].shape == (4, tiny_cfg.imu_window, 1 + tiny_cfg.imu_channels)
        seen += [sample_frames(batch, i)["json"] for i in range(4)]
    assert sorted(seen) == list(range(tiny_cfg.frames))
    assert seen != sorted(seen), "the naive loader shuffles"


def test_misaligned_catches_mixed_fields(tiny_raw: Path) -> None:
    batch = next(iter(naive_loader(tiny_raw, batch_size=3)))
    batch["lidar.npy"] = batch["lidar.npy"][1:] + batch["lidar.npy"][:1]
    problems = misaligned(batch)
    assert len(problems) == 3 and "lidar.npy" in problems[0]
    batch = next(iter(naive_loader(tiny_raw, batch_size=2)))
    batch["imu.npy"][0, :, 0] += 10  # window shifted by one IMU period
    assert "IMU times" in misaligned(batch)[0]


def test_empty_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no frames"):
        RawDrivingLog(tmp_path)
