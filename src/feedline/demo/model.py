"""The demo's small real model: cameras + ragged lidar + IMU -> ego speed.

A few conv layers over each of the 6 camera images (shared weights), a
PointNet-style encoder over the lidar sweep (a per-point MLP, then a max pool
per sample over its own points, so ragged sweeps need no padding), and an MLP
over the IMU window. The target, the ego speed, shows in every sensor, so the
loss falls within a few dozen steps.

Batches are dicts as the loaders deliver them: ``"cam0.jpg"``..``"cam5.jpg"``
(uint8 [B, H, W, 3] tensors or lists of arrays), ``"lidar.npy"`` (a list of
[1 + N, 4] float32 arrays or tensors, row 0 the header), ``"imu.npy"``
(float32 [B, window, 1 + C], column 0 the time), ``"label.npy"`` (float32
[B, 1], the speed) and ``"json"`` (the frame metadata, not used by the model). :func:`batch_inputs` turns either loader's batch
into model inputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from feedline.demo.synth import CAMERAS

CAMERA_FIELDS = tuple(f"{cam}.jpg" for cam in CAMERAS)
LIDAR_FIELD = "lidar.npy"
IMU_FIELD = "imu.npy"
META_FIELD = "json"
LABEL_FIELD = "label.npy"
POINT_STRIDE = 4
FIELDS_PER_FRAME = len(CAMERA_FIELDS) + 4  # cameras, lidar, IMU, label, JSON


class DemoNet(nn.Module):
    """Camera conv tower + PointNet lidar encoder + IMU MLP -> one scalar.

    Args:
        imu_shape: (window, channels) of the IMU field *without* its time column.
    """

    def __init__(self, imu_shape: tuple[int, int]) -> None:
        super().__init__()
        self.cams = nn.Sequential(
            nn.Conv2d(3, 8, 4, stride=4), nn.ReLU(),
            nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )
        self.points = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 32), nn.ReLU())
        self.imu = nn.Sequential(nn.Flatten(), nn.Linear(imu_shape[0] * imu_shape[1], 32), nn.ReLU())
        self.point_scale: torch.Tensor
        self.register_buffer("point_scale", torch.tensor([1 / 40, 1 / 40, 1.0, 1.0]))
        self.head = nn.Sequential(nn.Linear(32 * len(CAMERAS) + 32 + 32, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(
        self, cams: torch.Tensor, points: torch.Tensor, owner: torch.Tensor, imu: torch.Tensor
    ) -> torch.Tensor:
        """Predict the speed of each sample.

        Args:
            cams: uint8 [B, 6, H, W, 3].
            points: float32 [sum N_i, 4], every sample's lidar points concatenated.
            owner: int64 [sum N_i], the sample index of each point.
            imu: float32 [B, window, C] (time column already dropped).

        Returns:
            float32 [B].
        """
        b, n_cam, h, w, _ = cams.shape
        x = cams.reshape(b * n_cam, h, w, 3).permute(0, 3, 1, 2).float().div_(255.0)
        cam_feat = self.cams(x).reshape(b, -1)
        per_point = self.points(points * self.point_scale.to(points.dtype))
        pooled = torch.zeros(b, per_point.shape[1], device=per_point.device, dtype=per_point.dtype)
        index = owner[:, None].expand_as(per_point)
        pooled = pooled.scatter_reduce(0, index, per_point, reduce="amax", include_self=False)
        imu_feat = self.imu(imu)
        return self.head(torch.cat([cam_feat, pooled, imu_feat], dim=1)).squeeze(1)


def _as_tensor(value: Any, device: torch.device) -> torch.Tensor:
    tensor = value if isinstance(value, torch.Tensor) else torch.as_tensor(value)
    return tensor.to(device)


def _stack(values: Any, device: torch.device) -> torch.Tensor:
    if isinstance(values, torch.Tensor):
        return values.to(device)
    return torch.stack([_as_tensor(v, device) for v in values])


def batch_inputs(
    batch: Mapping[str, Any], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(cams, points, owner, imu, target) on ``device`` from a loader's batch.

    Raises:
        KeyError: a field the demo writes is missing from the batch.
    """
    cams = torch.stack([_stack(batch[f], device) for f in CAMERA_FIELDS], dim=1)
    sweeps: Sequence[Any] = batch[LIDAR_FIELD]
    # row 0 is the header; like PointNet, the encoder sees a subset (every
    # POINT_STRIDE-th point), while the loaders still deliver whole sweeps
    pts = [_as_tensor(s, device)[1::POINT_STRIDE] for s in sweeps]
    points = torch.cat(pts)
    # filled on the device: no host-to-device copy and no sync inside the step
    owner = torch.cat([torch.full((p.shape[0],), i, device=device) for i, p in enumerate(pts)])
    imu = _stack(batch[IMU_FIELD], device)[:, :, 1:]
    target = _stack(batch[LABEL_FIELD], device)[:, 0]
    return cams, points, owner, imu, target


def train_step(
    model: DemoNet, optimizer: torch.optim.Optimizer, batch: Mapping[str, Any], device: torch.device
) -> torch.Tensor:
    """One SGD step on ``batch``; returns the loss (a device tensor, not synced)."""
    cams, points, owner, imu, target = batch_inputs(batch, device)
    optimizer.zero_grad(set_to_none=True)
    loss = nn.functional.mse_loss(model(cams, points, owner, imu), target)
    loss.backward()
    optimizer.step()
    return loss.detach()
