"""``itertools.cycle(loader)`` with ``next()`` per step (a common way to get "infinite"
data): cycle keeps every batch of the first pass and replays them, so after one pass of
8 batches the loader is never asked again; each sample 5 ms of storage latency, batch 8,
1 worker; 10 ms step; 40 steps.

Truth: the loader's one pass (8 steps) is data-bound on read; the other 32 steps take
their batches from cycle's memory (no data path), so the run as a whole waits for data
about 8 x 40 ms of 40 x 10 ms + 8 x 40 ms: data-bound only while cycle fills.
"""

import itertools
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        time.sleep(0.005)
        return torch.full((4,), float(i))


if __name__ == "__main__":
    torch.set_num_threads(1)
    it = itertools.cycle(DataLoader(Slow(), batch_size=8, num_workers=1))
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    for _step in range(120):
        x = next(it)
        t0 = time.perf_counter()
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        time.sleep(max(0.0, 0.010 - (time.perf_counter() - t0)))
    print("steps 120")
