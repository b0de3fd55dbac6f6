"""Fixtures of the demo tests: a tiny raw driving log made in a temp folder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from feedline.demo.synth import SynthConfig, make_driving_log

TINY = SynthConfig(frames=12, width=64, height=48, lidar_points=(20, 200), seed=3)


@pytest.fixture(scope="session")
def tiny_raw(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 12-frame raw log (64x48 cameras, 20-200 lidar points), shared read-only."""
    raw = tmp_path_factory.mktemp("demo") / "raw"
    make_driving_log(TINY, raw)
    return raw


@pytest.fixture(scope="session")
def tiny_cfg() -> SynthConfig:
    """The config that wrote :func:`tiny_raw`."""
    return TINY


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    """Tiny models on a shared 2-core machine: one intra-op thread avoids
    OpenMP spin-waits under contention (restored after each test)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
