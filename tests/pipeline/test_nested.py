"""Nested batches: every tensor leaf is reached; custom objects use their own methods."""

from __future__ import annotations

import dataclasses
from collections import namedtuple
from typing import Any

import torch

from feedline.pipeline import nested

Point = namedtuple("Point", ["xy", "label"])


@dataclasses.dataclass
class Frame:
    image: torch.Tensor
    meta: dict[str, Any]


class Custom:
    """The DataLoader custom-batch contract: pin_memory() and to()."""

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t
        self.calls: list[str] = []

    def pin_memory(self) -> Custom:
        self.calls.append("pin")
        return self

    def to(self, device: torch.device, non_blocking: bool = False) -> Custom:
        self.calls.append(f"to:{device}:{non_blocking}")
        return Custom(self.t.to(device, non_blocking=non_blocking))


def _batch() -> dict[str, Any]:
    return {
        "list": [torch.ones(2), "text", 3],
        "tuple": (torch.zeros(1), None),
        "point": Point(torch.arange(2), "a"),
        "frame": Frame(torch.full((2,), 5.0), {"id": torch.tensor(7), "name": "f"}),
        "custom": Custom(torch.ones(1)),
    }


def test_map_reaches_every_leaf_and_keeps_types() -> None:
    out = nested.map_tensors(_batch(), lambda t: t.double() + 1)
    assert out["list"][0].dtype == torch.float64 and out["list"][1:] == ["text", 3]
    assert isinstance(out["tuple"], tuple) and out["tuple"][0].item() == 1.0
    assert isinstance(out["point"], Point) and out["point"].xy.tolist() == [1.0, 2.0]
    assert out["point"].label == "a"
    assert isinstance(out["frame"], Frame) and out["frame"].image.tolist() == [6.0, 6.0]
    assert out["frame"].meta["id"].item() == 8.0 and out["frame"].meta["name"] == "f"
    assert len(nested.tensors(_batch())) == 6  # the custom object's tensor too (record_stream)


def test_move_calls_to_on_custom_objects() -> None:
    batch = _batch()
    moved = nested.move(batch, torch.device("cpu"), non_blocking=True)
    assert batch["custom"].calls == ["to:cpu:True"]
    assert isinstance(moved["custom"], Custom)
    assert moved["frame"].meta["id"].item() == 7


def test_pin_skips_already_pinned_or_non_cpu_leaves() -> None:
    # Without CUDA nothing can be pinned; an empty batch of tensors is still walked,
    # and a custom object's pin_memory() is called (the real pinning runs in tests/gpu).
    custom = Custom(torch.ones(1))
    out = nested.pin({"c": custom, "s": "x"})
    assert custom.calls == ["pin"] and out["s"] == "x"


class Slotted:
    __slots__ = ("a", "b", "unset")

    def __init__(self, a: Any, b: Any) -> None:
        self.a, self.b = a, b


class Store(dict):  # a Mapping kept as an attribute (PyTorch Geometric's Data keeps a _store)
    pass


def test_tensors_finds_every_tensor_inside_custom_objects_once() -> None:
    """The copy engine record_streams what tensors() finds: a device tensor a custom batch's
    to() made and tensors() missed could be handed to the next batch's copy while the user's
    kernels still read it. Attributes, __slots__ and attribute-held mappings are walked; cycles
    and shared tensors once; classes and callables (a model) are not entered."""
    shared = torch.ones(3)
    custom = Custom(torch.zeros(2))
    custom.calls = [shared]  # type: ignore[list-item]
    holder = Custom(torch.arange(4))
    holder.store = Store(x=torch.full((1,), 9.0), same=shared)  # type: ignore[attr-defined]
    holder.cycle = holder  # type: ignore[attr-defined]
    holder.model = torch.nn.Linear(2, 2)  # type: ignore[attr-defined]
    batch = {"custom": custom, "slotted": Slotted(shared, (holder, Slotted(None, torch.eye(2))))}
    found = nested.tensors(batch)
    ids = [id(t) for t in found]
    assert len(ids) == len(set(ids)) == 5
    assert {id(custom.t), id(shared), id(holder.t), id(holder.store["x"])} <= set(ids)
    assert not {id(p) for p in holder.model.parameters()} & set(ids)
