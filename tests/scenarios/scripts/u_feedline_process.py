"""feedline.Loader with process workers (1 worker) and a slow CPU transform (4 ms per
sample, batch 8: 32 ms per batch) against an 8 ms step.

Truth: data-bound on the transform (CPU), about three quarters of the time waiting.
"""

import time

import numpy as np
import torch

import feedline


class Table:
    def __len__(self) -> int:
        return 4096

    def __getitem__(self, i: int) -> dict:
        return {"x": np.full((8,), float(i % 7), dtype=np.float32), "y": np.float32(i % 2)}


def jitter(sample: dict) -> dict:
    end = time.thread_time() + 0.004
    x = sample["x"]
    while time.thread_time() < end:
        x = x * np.float32(0.999)
    return {"x": x, "y": sample["y"]}


if __name__ == "__main__":
    loader = feedline.Loader(Table(), batch_size=8, workers=1, worker_type="process",
                             shuffle=True, transform=jitter)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    steps = 0
    for batch in loader:
        t0 = time.perf_counter()
        x, y = torch.as_tensor(batch["x"]), torch.as_tensor(batch["y"])
        loss = ((model(x).squeeze(1) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(max(0.0, 0.008 - (time.perf_counter() - t0)))
        steps += 1
        if steps == 50:
            break
    print("steps", steps)
