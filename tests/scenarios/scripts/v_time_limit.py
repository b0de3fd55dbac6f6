"""A time-limited run: ``deadline = time.monotonic() + 2.0`` and ``while time.monotonic() <
deadline`` around the epoch loop, with a ``break`` out of the loader when time is up (the
run length depends on the clock, not on a step count). 1 worker, 5 ms of storage latency
a sample, batch 8 (40 ms a batch) against a 4 ms step; 10 batches an epoch.

Truth: data-bound on read.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self):
        return 80

    def __getitem__(self, i):
        time.sleep(0.005)
        return torch.full((6,), float(i % 4)), torch.tensor(float(i % 2))


if __name__ == "__main__":
    torch.set_num_threads(1)
    loader = DataLoader(Slow(), batch_size=8, shuffle=True, num_workers=1)
    model = torch.nn.Linear(6, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    deadline = time.monotonic() + 2.0
    steps, epochs = 0, 0
    while time.monotonic() < deadline:
        for x, y in loader:
            t0 = time.perf_counter()
            loss = ((model(x).squeeze(1) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.004 - (time.perf_counter() - t0)))
            steps += 1
            if time.monotonic() >= deadline:
                break
        epochs += 1
    print(f"time limit reached, more than 10 steps {steps > 10}, epochs started {epochs > 1}")
