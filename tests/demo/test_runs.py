from __future__ import annotations

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
