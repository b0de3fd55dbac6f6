"""The seed's "before" code: a map-style Dataset over the raw small files.

This is the loader most paper code ships with (seed 003)::

    DataLoader(dataset, batch_size=64, num_workers=0, pin_memory=False)

over a ``Dataset`` whose ``__getitem__`` opens and decodes one small file per
field, in the training process, one sample after another. The only liberty
taken is a ``collate_fn`` that keeps the ragged lidar sweeps as a list (the
default collate cannot stack them), and the same JPEG decoder feedline uses,
so the comparison measures the loader, not the codec.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from feedline.demo.model import (
    CAMERA_FIELDS,
    IMU_FIELD,
    LABEL_FIELD,
    LIDAR_FIELD,
    META_FIELD,
)


class RawDrivingLog(Dataset[dict[str, Any]]):
    """One sample per frame of a raw log folder written by :mod:`feedline.demo.synth`.

    ``ds[i]`` opens and decodes the frame's 10 small files and returns a dict with the
    same field names as a packed sample (``"cam0.jpg"`` ... ``"json"``) plus
    ``"__key__"`` (the frame stem).

    Raises:
        FileNotFoundError: ``raw`` holds no ``*.json`` frame files.
    """

    def __init__(self, raw: Path) -> None:
        self.raw = Path(raw)
        self.stems = sorted(p.name[: -len(".json")] for p in self.raw.glob("*.json"))
        if not self.stems:
            raise FileNotFoundError(f"no frames (*.json) in {self.raw}")

    def __len__(self) -> int:
        return len(self.stems)

    def __getitem__(self, index: int) -> dict[str, Any]:
        import simplejpeg

        stem = self.raw / self.stems[index]
        sample: dict[str, Any] = {"__key__": self.stems[index]}
        for field in CAMERA_FIELDS:
            with open(f"{stem}.{field}", "rb") as f:
                sample[field] = torch.from_numpy(simplejpeg.decode_jpeg(f.read()))
        for field in (LIDAR_FIELD, IMU_FIELD, LABEL_FIELD):
            sample[field] = torch.from_numpy(np.load(f"{stem}.{field}", allow_pickle=False))
        with open(f"{stem}.{META_FIELD}", "rb") as f:
            sample[META_FIELD] = json.load(f)
        return sample


def collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Stack same-shape tensors; keep ragged tensors and non-tensors as lists."""
    out: dict[str, Any] = {}
    for field in samples[0]:
        values = [s[field] for s in samples]
        first = values[0]
        same_shape = isinstance(first, torch.Tensor) and all(
            isinstance(v, torch.Tensor) and v.shape == first.shape for v in values
        )
        out[field] = torch.stack(values) if same_shape else values
    return out


def naive_loader(raw: Path, batch_size: int, *, seed: int = 0) -> DataLoader[dict[str, Any]]:
    """The seed's "before" DataLoader over ``raw``: no workers, no pinned memory."""
    generator = torch.Generator().manual_seed(seed)
    return DataLoader(
        RawDrivingLog(raw),
        batch_size=batch_size,
        shuffle=True,
        num_workers=0,
        pin_memory=False,
        drop_last=True,
        collate_fn=collate,
        generator=generator,
    )
