"""Samples whose dicts list the same keys in different orders: records parsed from JSON
files written by two tools, or a ``__getitem__`` that builds its dict in two code paths.
Each value must land under its own key (dict equality ignores order, so the structure
check alone cannot tell)."""

from __future__ import annotations

from typing import Any

import numpy as np

import feedline


class Records:
    """Even items from tool A (image, target{boxes, meta}), odd ones from tool B (reversed)."""

    def __len__(self) -> int:
        return 12

    def __getitem__(self, i: int) -> dict[str, Any]:
        image = np.full((2, 2), i, np.uint8)
        meta = {"camera": f"cam{i % 3}", "exposure": float(i) / 10}
        boxes = np.arange(4 * (1 + i % 3), dtype=np.float32).reshape(-1, 4) + i
        if i % 2:
            return {"target": {"meta": dict(reversed(list(meta.items()))), "boxes": boxes},
                    "id": i, "image": image}
        return {"image": image, "id": i, "target": {"boxes": boxes, "meta": meta}}


def test_values_follow_their_keys_whatever_the_order() -> None:
    ds = Records()
    loader = feedline.Loader(ds, batch_size=4, workers=2, shuffle=True, seed=1, drop_last=False)
    seen = []
    for batch in loader:
        for row, i in enumerate(batch["id"].tolist()):
            seen.append(i)
            assert batch["image"][row].tolist() == [[i, i], [i, i]]
            assert batch["target"]["meta"]["camera"][row] == f"cam{i % 3}"
            assert float(batch["target"]["meta"]["exposure"][row]) == float(i) / 10
            np.testing.assert_array_equal(batch["target"]["boxes"][row].numpy(),
                                          ds[i]["target"]["boxes"])
    assert sorted(seen) == list(range(12))
