from __future__ import annotations

from pathlib import Path

import torch

from feedline.demo.model import POINT_STRIDE, DemoNet, batch_inputs, train_step
from feedline.demo.naive import naive_loader

IMU = (10, 6)  # tiny_raw's (imu_window, imu_channels)


def test_loss_decreases(tiny_raw: Path) -> None:
    torch.manual_seed(0)
    model = DemoNet(IMU)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    losses = []
    loader = naive_loader(tiny_raw, batch_size=4)
    for _ in range(5):
        for batch in loader:
            losses.append(float(train_step(model, opt, batch, torch.device("cpu"))))
    first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
    assert last < 0.5 * first, (first, last)


def test_point_pool_is_per_sample(tiny_raw: Path) -> None:
    torch.manual_seed(0)
    model = DemoNet(IMU).eval()
    batch = next(iter(naive_loader(tiny_raw, batch_size=3)))
    cams, points, owner, imu, target = batch_inputs(batch, torch.device("cpu"))
    counts = [len(range(1, s.shape[0], POINT_STRIDE)) for s in batch["lidar.npy"]]
    assert points.shape == (sum(counts), 4)
    assert owner.tolist() == [i for i, n in enumerate(counts) for _ in range(n)]
    assert target.shape == (3,)
    base = model(cams, points, owner, imu)
    moved = points.clone()
    moved[owner == 2] += 5.0  # only sample 2's sweep changes
    out = model(cams, moved, owner, imu)
    assert torch.equal(out[:2], base[:2])
    assert not torch.equal(out[2], base[2])
