"""GPU-machine checks of feedline.wrap() and nested pinning (custom batch types).

Collected only with FEEDLINE_GPU=1; fails, never skips, without CUDA.
"""

from __future__ import annotations

import dataclasses
from collections import namedtuple
from typing import Any

import torch
from torch.utils.data import DataLoader

import feedline
from feedline.pipeline import nested

DEV = torch.device("cuda:0")
Pair = namedtuple("Pair", ["a", "b"])


@dataclasses.dataclass
class Frame:
    image: torch.Tensor
    name: str


class Custom:
    """The custom-batch contract: pin_memory() and to()."""

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t

    def pin_memory(self) -> Custom:
        return Custom(self.t.pin_memory())

    def to(self, device: torch.device, non_blocking: bool = False) -> Custom:
        return Custom(self.t.to(device, non_blocking=non_blocking))


class Items:
    def __len__(self) -> int:
        return 32

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"x": torch.full((3, 8), float(i)), "pair": Pair(torch.tensor(i), "p"),
                "tag": f"t{i}"}


def _collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    return {"x": torch.stack([s["x"] for s in samples]),
            "pair": Pair(torch.stack([s["pair"].a for s in samples]), "p"),
            "frame": Frame(torch.zeros(2, 2), "f"), "custom": Custom(torch.ones(4)),
            "tags": [s["tag"] for s in samples]}


def test_pin_reaches_every_leaf() -> None:
    assert torch.cuda.is_available(), "needs CUDA"
    pinned = nested.pin(_collate([Items()[i] for i in range(4)]))
    assert pinned["x"].is_pinned() and pinned["pair"].a.is_pinned()
    assert pinned["frame"].image.is_pinned() and pinned["custom"].t.is_pinned()


def test_wrap_moves_nested_batches_with_the_copy_stream() -> None:
    assert torch.cuda.is_available(), "needs CUDA"
    dl = DataLoader(Items(), batch_size=4, num_workers=0, collate_fn=_collate)
    wrapped = feedline.wrap(dl, device="cuda:0", prefetch=2)
    seen = []
    for batch in wrapped:
        assert batch["x"].device == DEV and batch["pair"].a.device == DEV
        assert batch["frame"].image.device == DEV and batch["custom"].t.device == DEV
        assert batch["pair"].b == "p" and batch["frame"].name == "f"
        seen.extend(batch["pair"].a.tolist())
        assert torch.equal(batch["x"][:, 0, 0].long().cpu(), batch["pair"].a.cpu())
    assert seen == list(range(32)) and len(wrapped) == 8
