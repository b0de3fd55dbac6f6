from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from feedline.demo.runs import pick_device, to_device
from feedline.errors import DeviceError


def test_pick_device() -> None:
    assert pick_device(None) == ("cuda" if torch.cuda.is_available() else "cpu")
    assert pick_device("cpu") == "cpu"
    with pytest.raises(ValueError, match="device"):
        pick_device("tpu")
    with pytest.raises(ValueError, match="device"):
        pick_device("not a device")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error path")
def test_missing_cuda_is_a_device_error() -> None:
    with pytest.raises(DeviceError, match="--device cpu"):
        pick_device("cuda")


def test_to_device_moves_tensors_and_lists() -> None:
    batch = {"a": torch.ones(2), "b": [torch.zeros(1), torch.zeros(3)], "c": [{"x": 1}], "__key__": ["k"]}
    out = to_device(batch, torch.device("cpu"))
    assert out["a"].device.type == "cpu" and out["b"][1].shape == (3,)
    assert out["c"] == [{"x": 1}] and out["__key__"] == ["k"]


def test_measured_run_cycles_epochs_and_reports(tiny_raw: Path) -> None:
    from feedline.demo.model import DemoNet
    from feedline.demo.naive import naive_loader
    from feedline.demo.runs import measured_run
    from feedline.demo.table import figures_from_report

    torch.manual_seed(0)
    init = DemoNet((10, 6)).state_dict()
    snapshot = {k: v.clone() for k, v in init.items()}
    loader = naive_loader(tiny_raw, batch_size=4)  # 3 batches per epoch
    ticks: list[int] = []
    out = measured_run(loader, name="before", init=init, imu_shape=(10, 6), device="cpu",
                       steps=7, batch_size=4, copy_to_device=True,
                       on_step=lambda: ticks.append(1))
    assert len(out.losses) == 7 and len(ticks) == 7
    rep = out.report
    assert rep.name == "before" and rep.steps >= 6  # the first step may count as warm-up
    assert rep.stages["h2d"].count == 7  # every .to(device) copy was timed
    assert out.wall_s > 0 and rep.step_time.p50 > 0
    figures = figures_from_report(rep, name="before", loader="naive", device="cpu", steps=7,
                                  batch_size=4, wall_s=out.wall_s, losses=out.losses)
    h2d = rep.stages["h2d"]  # one naive copy per batch on cpu: per batch = per copy
    assert figures.h2d_per_batch_s == rep.analysis["h2d"]
    assert 0 < figures.h2d_per_batch_s <= h2d.max
    assert figures.last_loss == out.losses[-1] and figures.verdict == rep.verdict
    # training a run never changes the shared init: each run starts from the same weights
    assert all(torch.equal(init[k], snapshot[k]) for k in init)


def test_measured_run_rejects_an_empty_loader() -> None:
    from feedline.demo.model import DemoNet
    from feedline.demo.runs import measured_run

    init = DemoNet((10, 6)).state_dict()
    with pytest.raises(ValueError, match="no batches"):
        measured_run([], name="x", init=init, imu_shape=(10, 6), device="cpu", steps=2,
                     batch_size=1, copy_to_device=False)


class _Mixed:
    """A loader that hands over batches whose lidar sweeps belong to other samples."""

    def __init__(self, inner: Iterable[dict[str, Any]]) -> None:
        self.inner = inner

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for batch in self.inner:
            batch["lidar.npy"] = batch["lidar.npy"][1:] + batch["lidar.npy"][:1]
            yield batch


def test_measured_run_stops_on_a_misaligned_first_batch(tiny_raw: Path) -> None:
    from feedline.demo.align import misaligned
    from feedline.demo.model import DemoNet
    from feedline.demo.naive import naive_loader
    from feedline.demo.runs import measured_run
    from feedline.errors import FeedlineError

    init = DemoNet((10, 6)).state_dict()
    kwargs: dict[str, Any] = dict(name="x", init=init, imu_shape=(10, 6), device="cpu",
                                  steps=2, batch_size=4, copy_to_device=False, verify=misaligned)
    out = measured_run(naive_loader(tiny_raw, 4), **kwargs)
    assert len(out.losses) == 2
    with pytest.raises(FeedlineError, match=r"lidar\.npy") as e:
        measured_run(_Mixed(naive_loader(tiny_raw, 4)), **kwargs)
    assert e.value.stage == "collate" and "more" in str(e.value)


def test_cycle_yields_exactly_steps_items() -> None:
    from feedline.demo.runs import cycle

    assert list(cycle([1, 2], 5, name="x")) == [1, 2, 1, 2, 1]
    assert list(cycle([1, 2, 3], 2, name="x")) == [1, 2]
    with pytest.raises(ValueError, match="'x'"):
        list(cycle([], 1, name="x"))


def test_default_workers_leave_cores_to_a_cpu_step() -> None:
    import os

    from feedline.demo import default_workers

    cores = len(os.sched_getaffinity(0))
    assert default_workers("cuda") == min(cores, 8)
    assert default_workers("cpu") == max(1, cores // 2)


def test_cycle_sets_a_new_epoch_for_each_pass() -> None:
    import warnings

    import numpy as np

    import feedline
    from feedline.demo.runs import cycle

    class Ten:
        def __len__(self) -> int:
            return 10

        def __getitem__(self, i: int) -> dict:
            return {"i": np.int64(i)}

    loader = feedline.Loader(Ten(), batch_size=5, workers=1, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "order repeats" warning: each pass is a new epoch
        orders = [b["i"].tolist() for b in cycle(loader, 6, name="x", epochs=loader)]
    passes = [orders[k] + orders[k + 1] for k in (0, 2, 4)]
    assert all(sorted(p) == list(range(10)) for p in passes)
    assert len({tuple(p) for p in passes}) > 1  # the order changes from pass to pass
