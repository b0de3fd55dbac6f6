"""Which frame each field of a delivered sample came from.

Every field the synthetic log writes carries its frame (see
:mod:`feedline.demo.synth`). :func:`batch_frames` reads it back from a batch
as either loader delivers it, so tests and the demo itself can check that a
sample's six cameras, its lidar sweep and its IMU window share one timestamp,
and that the IMU window is exactly the 100 ms before it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from feedline.demo.model import CAMERA_FIELDS, IMU_FIELD, LIDAR_FIELD, META_FIELD
from feedline.demo.synth import (
    FRAME_PERIOD_MS,
    IMU_PERIOD_MS,
    decode_camera_tag,
    frame_timestamp_ms,
)


def _numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def _meta(batch: Mapping[str, Any], i: int) -> Mapping[str, Any]:
    meta = batch[META_FIELD]
    if isinstance(meta, Mapping):
        return {k: (v[i].item() if hasattr(v[i], "item") else v[i]) for k, v in meta.items()}
    return meta[i]


def sample_frames(batch: Mapping[str, Any], i: int) -> dict[str, int]:
    """The frame id that each field of sample ``i`` of ``batch`` encodes.

    Keys: each camera field, ``"lidar.npy"`` (its header), ``"imu.npy"`` (its
    last sample time + one IMU period, as a frame), ``"json"`` and ``"__key__"``.
    """
    frames: dict[str, int] = {}
    for cam_index, field in enumerate(CAMERA_FIELDS):
        frame, cam = decode_camera_tag(_numpy(batch[field][i]))
        frames[field] = frame if cam == cam_index else -1
    lidar = _numpy(batch[LIDAR_FIELD][i])
    ts, frame = int(lidar[0, 0]), int(lidar[0, 1])
    frames[LIDAR_FIELD] = frame if ts == frame_timestamp_ms(frame) else -1
    imu_end = int(_numpy(batch[IMU_FIELD][i])[-1, 0]) + IMU_PERIOD_MS
    frames[IMU_FIELD] = imu_end // FRAME_PERIOD_MS - 1
    frames[META_FIELD] = int(_meta(batch, i)["frame"])
    digits = re.search(r"(\d+)$", str(batch["__key__"][i]))
    frames["__key__"] = int(digits.group(1)) if digits else -1
    return frames


def misaligned(batch: Mapping[str, Any]) -> list[str]:
    """One line per sample whose fields disagree on the frame (empty: all aligned).

    Also checks each IMU window: it must cover exactly the 100 ms before the
    frame timestamp (first sample at t - 100 ms, evenly spaced at 10 ms).
    """
    problems = []
    for i in range(len(batch["__key__"])):
        frames = sample_frames(batch, i)
        if len(set(frames.values())) != 1:
            problems.append(f"sample {i}: fields from different frames {frames}")
            continue
        times = _numpy(batch[IMU_FIELD][i])[:, 0].astype(np.int64)
        t = frame_timestamp_ms(frames[META_FIELD])
        expected = t - IMU_PERIOD_MS * np.arange(len(times), 0, -1)
        if not np.array_equal(times, expected):
            problems.append(f"sample {i}: IMU times {times.tolist()} are not the window before {t} ms")
    return problems
