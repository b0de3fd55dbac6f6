"""Compute-bound through feedline.Loader: 2 thread workers, 8 reads of 1 ms per batch, 25 ms step.

The Loader reports its own read/decode/collate spans; diagnose hooks its iteration.
"""

import time

from _common import Step

import feedline


class Samples:
    def __len__(self) -> int:
        return 4096

    def __getitem__(self, i: int) -> dict:
        import torch

        time.sleep(0.001)
        return {"x": torch.full((32,), float(i % 7))}


if __name__ == "__main__":
    step = Step(32, 0.025)
    loader = feedline.Loader(Samples(), batch_size=8, workers=2, shuffle=False)
    for _ in range(100):
        for batch in loader:
            x = batch["x"]
            step(x, x.sum(1) / 32)
