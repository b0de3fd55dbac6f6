"""feedline.Loader with a sleep in its transform (storage-like latency), 1 thread worker.

Truth: data-bound; the sleep is blocked time, so the binding stage is read (as the same
sleep in a DataLoader's dataset is), not decode.
"""

import time

from _common import Step

import feedline


class Samples:
    def __len__(self) -> int:
        return 4096

    def __getitem__(self, i: int) -> dict:
        import numpy as np

        return {"x": np.full((8,), float(i % 7), dtype=np.float32)}


def slow(sample: dict) -> dict:
    time.sleep(0.004)
    return sample


if __name__ == "__main__":
    step = Step(8, 0.005)
    loader = feedline.Loader(Samples(), batch_size=8, workers=1, shuffle=False, transform=slow)
    for _ in range(100):
        for batch in loader:
            x = batch["x"]
            step(x, x.sum(1) / 8)
