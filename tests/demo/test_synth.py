from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import simplejpeg

from feedline.demo.synth import (
    CAMERAS,
    SynthConfig,
    camera_image,
    decode_camera_tag,
    frame_timestamp_ms,
    make_driving_log,
)


def test_one_small_file_per_field(tiny_raw: Path, tiny_cfg: SynthConfig) -> None:
    names = sorted(p.name for p in tiny_raw.iterdir())
    assert len(names) == tiny_cfg.frames * 10
    assert "frame_000007.cam5.jpg" in names
    assert "frame_000007.lidar.npy" in names
    assert "frame_000007.imu.npy" in names
    assert "frame_000007.json" in names
    assert "frame_000007.label.npy" in names


def test_every_field_carries_its_frame(tiny_raw: Path, tiny_cfg: SynthConfig) -> None:
    counts = set()
    for frame in range(tiny_cfg.frames):
        stem = tiny_raw / f"frame_{frame:06d}"
        meta = json.loads(Path(f"{stem}.json").read_text())
        t = frame_timestamp_ms(frame)
        assert meta["frame"] == frame and meta["timestamp_ms"] == t
        for cam_index, cam in enumerate(CAMERAS):
            img = simplejpeg.decode_jpeg(Path(f"{stem}.{cam}.jpg").read_bytes())
            assert img.shape == (tiny_cfg.height, tiny_cfg.width, 3)
            assert decode_camera_tag(img) == (frame, cam_index)
        lidar = np.load(f"{stem}.lidar.npy", allow_pickle=False)
        assert lidar.dtype == np.float32 and lidar.shape[1] == 4
        assert (lidar[0, 0], lidar[0, 1], lidar[0, 2]) == (t, frame, lidar.shape[0] - 1)
        assert meta["lidar_points"] == lidar.shape[0] - 1
        label = np.load(f"{stem}.label.npy", allow_pickle=False)
        assert label.dtype == np.float32 and label.shape == (1,)
        assert label[0] == pytest.approx(meta["speed"])
        counts.add(lidar.shape[0])
        imu = np.load(f"{stem}.imu.npy", allow_pickle=False)
        assert imu.shape == (tiny_cfg.imu_window, 1 + tiny_cfg.imu_channels)
        # exactly the 100 ms before the frame at 100 Hz
        assert imu[:, 0].tolist() == [t - 100 + 10 * k for k in range(10)]
    assert len(counts) > 1, "lidar point count must vary per frame"


def test_tag_survives_low_jpeg_quality() -> None:
    cfg = SynthConfig(frames=1, quality=40)
    rng = np.random.default_rng(0)
    for frame, cam in ((0, 0), (123_456, 5), (2**20 - 1, 3)):
        img = camera_image(cfg, frame, cam, rng)
        data = simplejpeg.encode_jpeg(img, quality=cfg.quality, colorspace="RGB")
        assert decode_camera_tag(simplejpeg.decode_jpeg(data)) == (frame, cam)
        # channels-first tensors (as a model sees them) decode too
        assert decode_camera_tag(simplejpeg.decode_jpeg(data).transpose(2, 0, 1)) == (frame, cam)


def test_same_config_writes_identical_bytes(tmp_path: Path) -> None:
    cfg = SynthConfig(frames=2, width=64, height=48, lidar_points=(5, 9))
    make_driving_log(cfg, tmp_path / "a")
    make_driving_log(cfg, tmp_path / "b", workers=2)
    for p in (tmp_path / "a").iterdir():
        assert p.read_bytes() == (tmp_path / "b" / p.name).read_bytes(), p.name


def test_default_jpegs_are_realistic(tmp_path: Path) -> None:
    calls = []
    make_driving_log(SynthConfig(frames=2), tmp_path, progress=calls.append)
    assert calls == [1, 1]
    sizes = [p.stat().st_size for p in tmp_path.glob("*.jpg")]
    # smooth gradients + noise: neither a flat few-hundred-byte image nor raw size
    assert all(2_000 < s < 160 * 120 * 3 // 2 for s in sizes), sizes
    assert len(set(sizes)) > 1


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        ({"frames": 0}, "frames"),
        ({"width": 32}, "width"),
        ({"lidar_points": (10, 5)}, "lidar_points"),
        ({"imu_window": 0}, "imu_window"),
        ({"quality": 0}, "quality"),
    ],
)
def test_bad_config_names_the_option(kwargs: dict[str, object], word: str) -> None:
    with pytest.raises(ValueError, match=word):
        SynthConfig(**kwargs).validate()  # type: ignore[arg-type]
