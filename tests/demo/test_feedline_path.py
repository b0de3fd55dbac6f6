"""The feedline path: the raw log packed into shards, read by feedline.Loader."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from feedline.demo import _parts
from feedline.demo.align import misaligned, sample_frames
from feedline.demo.model import CAMERA_FIELDS, DemoNet, train_step
from feedline.demo.synth import SynthConfig


@pytest.fixture(scope="module")
def packed(tiny_raw: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("packed")
    seen: list[tuple[int, int]] = []
    _parts.pack(tiny_raw, out, shard_size=64 * 1024, workers=2,
                progress=lambda done, total: seen.append((done, total)))
    assert seen and seen[-1][0] == seen[-1][1] == len(list(tiny_raw.iterdir()))
    return out


def test_loader_batches_are_aligned_and_ragged(packed: Path, tiny_cfg: SynthConfig) -> None:
    loader = _parts.feedline_loader(packed, batch_size=4, device="cpu", workers=2, seed=5)
    frames, counts = [], set()
    for batch in loader:
        assert misaligned(batch) == []
        for field in CAMERA_FIELDS:
            assert tuple(batch[field].shape) == (4, tiny_cfg.height, tiny_cfg.width, 3)
        sweeps = batch["lidar.npy"]
        assert isinstance(sweeps, list) and len(sweeps) == 4
        counts |= {int(s.shape[0]) for s in sweeps}
        frames += [sample_frames(batch, i)["json"] for i in range(4)]
    assert sorted(frames) == list(range(tiny_cfg.frames))
    assert len(counts) > 1, "sweeps of different lengths stay separate (ragged)"


def test_loader_batches_train_the_model(packed: Path) -> None:
    torch.manual_seed(0)
    model = DemoNet((10, 6))
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    loader = _parts.feedline_loader(packed, batch_size=4, device="cpu", workers=2, seed=0)
    losses = [float(train_step(model, opt, b, torch.device("cpu"))) for b in loader]
    assert len(losses) == 3 and all(loss == loss for loss in losses)


def test_measured_run_over_the_loader_spans_epochs(packed: Path) -> None:
    from feedline.demo.align import misaligned
    from feedline.demo.runs import measured_run

    init = DemoNet((10, 6)).state_dict()
    loader = _parts.feedline_loader(packed, batch_size=4, device="cpu", workers=2, seed=0)
    out = measured_run(loader, name="after", init=init, imu_shape=(10, 6), device="cpu",
                       steps=7, batch_size=4, copy_to_device=False, verify=misaligned)
    assert len(out.losses) == 7  # 3 batches per epoch: the loader was iterated 3 times
    assert out.report.loader.get("num_workers") == 2
