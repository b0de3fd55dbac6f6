"""A synthetic multi-sensor driving log, written the way raw logs arrive.

One small file per field per frame (seed 001's workload: surround cameras,
a lidar sweep, a 100 Hz IMU window), in one folder::

    raw/frame_000123.cam0.jpg ... raw/frame_000123.cam5.jpg   RGB JPEG (simplejpeg)
    raw/frame_000123.lidar.npy    float32 [1 + N, 4], N varies per frame
    raw/frame_000123.imu.npy      float32 [window, 1 + imu_channels]
    raw/frame_000123.label.npy    float32 [1]: the regression target (ego speed)
    raw/frame_000123.json         {"frame", "timestamp_ms", "speed", ...}

Every field carries its frame recoverably, so a loader that mixes fields of
different frames is caught (see :func:`decode_camera_tag`):

* cameras: a grid of 8x8 black/white blocks in the top-left corner spells
  the frame id (20 bits) and the camera index (4 bits), robust to JPEG;
* lidar: row 0 is a header ``(sweep_timestamp_ms, frame_id, N, 0)``; the
  points are rows 1..N (x, y, z, intensity);
* IMU: column 0 is the sample time in ms; the window holds the samples at
  ``t - 100 ms, t - 90 ms, ..., t - 10 ms`` (the 100 ms before the frame at
  100 Hz, so ``window = 10`` by default).

Timestamps are integer milliseconds (frames at 10 Hz), exact in float32 for
logs up to 4.6 hours. The regression target ``speed`` (a smooth function of
time) shows in every sensor: camera brightness, lidar height, IMU channel 1.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

CAMERAS = tuple(f"cam{i}" for i in range(6))
FRAME_PERIOD_MS = 100
IMU_PERIOD_MS = 10
TAG_BLOCK = 8
TAG_FRAME_BITS = 20
TAG_CAMERA_BITS = 4
_TAG_BITS = TAG_FRAME_BITS + TAG_CAMERA_BITS


@dataclass(frozen=True)
class SynthConfig:
    """Sizes of the synthetic log. Defaults keep the whole demo quick on 2 cores.

    Attributes:
        frames: number of frames (samples).
        width, height: camera image size in pixels (at least 64 x 48).
        lidar_points: (min, max) points per sweep; the count varies per frame.
        imu_window: IMU samples per frame; times ``IMU_PERIOD_MS`` is the
            window length (10 -> exactly the 100 ms before the frame).
        imu_channels: IMU/joint channels besides the time column.
        quality: JPEG quality.
        seed: random seed; the same config writes byte-identical files.
    """

    frames: int = 512
    width: int = 160
    height: int = 120
    lidar_points: tuple[int, int] = (1000, 2000)
    imu_window: int = 10
    imu_channels: int = 6
    quality: int = 90
    seed: int = 0

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first bad attribute."""
        if self.frames < 1 or self.frames >= 2**TAG_FRAME_BITS:
            raise ValueError(f"frames must be in 1..{2**TAG_FRAME_BITS - 1}, got {self.frames}")
        if self.width < 64 or self.height < 48:
            raise ValueError(
                f"width x height must be at least 64 x 48, got {self.width} x {self.height}"
            )
        lo, hi = self.lidar_points
        if not 1 <= lo <= hi:
            raise ValueError(f"lidar_points must be (min, max) with 1 <= min <= max, got {lo, hi}")
        if self.imu_window < 1 or self.imu_channels < 1:
            raise ValueError("imu_window and imu_channels must be >= 1")
        if not 1 <= self.quality <= 100:
            raise ValueError(f"quality must be in 1..100, got {self.quality}")


def frame_timestamp_ms(frame: int) -> int:
    """The timestamp of ``frame`` in ms since the start of the log (10 Hz)."""
    return (frame + 1) * FRAME_PERIOD_MS


def speed_at(t_ms: float) -> float:
    """The ego speed (the regression target, in [0, 1]) at time ``t_ms``."""
    t = t_ms / 1000.0
    return 0.5 + 0.3 * math.sin(0.7 * t) + 0.15 * math.sin(2.3 * t + 1.0)


def frame_stem(frame: int) -> str:
    """File-name stem shared by a frame's fields: ``frame_000123``."""
    return f"frame_{frame:06d}"


def _tag_bits(frame: int, camera: int) -> np.ndarray:
    value = frame | (camera << TAG_FRAME_BITS)
    return np.array([(value >> b) & 1 for b in range(_TAG_BITS)], dtype=np.uint8)


def _tag_layout(width: int) -> tuple[int, int]:
    per_row = width // TAG_BLOCK
    rows = -(-_TAG_BITS // per_row)
    return per_row, rows


def camera_image(cfg: SynthConfig, frame: int, camera: int, rng: np.random.Generator) -> np.ndarray:
    """One RGB uint8 image [H, W, 3]: gradients + noise + a moving pattern + the tag."""
    h, w = cfg.height, cfg.width
    y = np.linspace(0.0, 1.0, h, dtype=np.float32)[:, None]
    x = np.linspace(0.0, 1.0, w, dtype=np.float32)[None, :]
    speed = speed_at(frame_timestamp_ms(frame))
    phase = 0.35 * frame + camera
    stripes = np.sin(12.0 * x + 5.0 * y + phase)
    gain = np.float32(255.0 * (0.25 + 0.5 * speed))
    img = rng.standard_normal((h, w, 3), dtype=np.float32)
    img *= 6.0
    img[..., 0] += gain * (0.6 * y + 0.2 * x)
    img[..., 1] += gain * (0.4 + 0.3 * x * y)
    img[..., 2] += gain * (0.25 + 0.25 * stripes + 0.2 * y)
    out = np.clip(img, 0, 255, out=img).astype(np.uint8)
    per_row, _ = _tag_layout(w)
    for bit_index, bit in enumerate(_tag_bits(frame, camera)):
        r, c = divmod(bit_index, per_row)
        out[r * TAG_BLOCK:(r + 1) * TAG_BLOCK, c * TAG_BLOCK:(c + 1) * TAG_BLOCK] = 255 * bit
    return out


def decode_camera_tag(image: np.ndarray) -> tuple[int, int]:
    """Recover ``(frame, camera)`` from an image written by :func:`camera_image`.

    ``image`` is [H, W, 3] or [3, H, W] (uint8 or float in 0..255).
    """
    arr = np.asarray(image, dtype=np.float32)
    if arr.ndim == 3 and arr.shape[0] == 3 and arr.shape[-1] != 3:
        arr = arr.transpose(1, 2, 0)
    gray = arr.mean(axis=-1)
    per_row, _ = _tag_layout(gray.shape[1])
    value = 0
    for b in range(_TAG_BITS):
        r, c = divmod(b, per_row)
        block = gray[r * TAG_BLOCK + 2:(r + 1) * TAG_BLOCK - 2, c * TAG_BLOCK + 2:(c + 1) * TAG_BLOCK - 2]
        if float(block.mean()) > 127.5:
            value |= 1 << b
    return value & (2**TAG_FRAME_BITS - 1), value >> TAG_FRAME_BITS


def lidar_sweep(cfg: SynthConfig, frame: int, rng: np.random.Generator) -> np.ndarray:
    """float32 [1 + N, 4]: header row (timestamp_ms, frame, N, 0), then N points."""
    lo, hi = cfg.lidar_points
    n = int(rng.integers(lo, hi + 1))
    t_ms = frame_timestamp_ms(frame)
    angle = rng.uniform(0.0, 2 * math.pi, n)
    dist = rng.uniform(2.0, 40.0, n)
    pts = np.empty((n + 1, 4), dtype=np.float32)
    pts[0] = (t_ms, frame, n, 0.0)
    pts[1:, 0] = dist * np.cos(angle)
    pts[1:, 1] = dist * np.sin(angle)
    pts[1:, 2] = rng.normal(speed_at(t_ms), 0.2, n)
    pts[1:, 3] = rng.uniform(0.0, 1.0, n)
    return pts


def imu_window(cfg: SynthConfig, frame: int, rng: np.random.Generator) -> np.ndarray:
    """float32 [window, 1 + channels]: time column (ms), then IMU/joint channels."""
    t_frame = frame_timestamp_ms(frame)
    times = t_frame - IMU_PERIOD_MS * np.arange(cfg.imu_window, 0, -1)
    out = np.empty((cfg.imu_window, 1 + cfg.imu_channels), dtype=np.float32)
    out[:, 0] = times
    out[:, 1] = [speed_at(float(t)) for t in times]
    out[:, 2:] = rng.normal(0.0, 0.1, size=(cfg.imu_window, cfg.imu_channels - 1))
    out[:, 1] += rng.normal(0.0, 0.02, cfg.imu_window)
    return out


def write_frame(cfg: SynthConfig, raw: Path, frame: int) -> int:
    """Write every field of ``frame`` into ``raw``; return the bytes written."""
    import simplejpeg

    rng = np.random.default_rng([cfg.seed, frame])
    stem = raw / frame_stem(frame)
    written = 0
    for cam_index, cam in enumerate(CAMERAS):
        img = camera_image(cfg, frame, cam_index, rng)
        data = simplejpeg.encode_jpeg(img, quality=cfg.quality, colorspace="RGB")
        Path(f"{stem}.{cam}.jpg").write_bytes(data)
        written += len(data)
    lidar = lidar_sweep(cfg, frame, rng)
    imu = imu_window(cfg, frame, rng)
    label = np.array([speed_at(frame_timestamp_ms(frame))], dtype=np.float32)
    for name, arr in (("lidar", lidar), ("imu", imu), ("label", label)):
        path = Path(f"{stem}.{name}.npy")
        np.save(path, arr, allow_pickle=False)
        written += path.stat().st_size
    t_ms = frame_timestamp_ms(frame)
    meta = {
        "frame": frame,
        "timestamp_ms": t_ms,
        "speed": speed_at(t_ms),
        "lidar_points": int(lidar.shape[0] - 1),
        "cameras": list(CAMERAS),
    }
    data_json = json.dumps(meta, sort_keys=True).encode()
    Path(f"{stem}.json").write_bytes(data_json)
    return written + len(data_json)


def make_driving_log(
    cfg: SynthConfig, raw: Path, *, workers: int = 1,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Write ``cfg.frames`` frames into the folder ``raw`` (created if missing).

    Args:
        cfg: sizes; validated first (``ValueError`` naming the bad attribute).
        raw: destination folder; existing files of the same names are replaced.
        workers: threads writing frames (the output does not depend on it).
        progress: called with 1 after each frame, in the caller's thread.

    Returns:
        Total bytes written.
    """
    cfg.validate()
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    raw.mkdir(parents=True, exist_ok=True)
    total = 0
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for written in pool.map(partial(write_frame, cfg, raw), range(cfg.frames)):
            total += written
            if progress is not None:
                progress(1)
    return total
