"""``DataLoader(num_workers=4, prefetch_factor=1, persistent_workers=True)``: one batch in
flight per worker (the memory-saving setting); each sample 2 ms of storage latency,
batch 4 (8 ms per batch, 2 ms with four workers) against a 40 ms step; 40 steps.

Truth: compute-bound: a prefetch of one is enough when the workers are this far ahead.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class Shards(Dataset):
    def __len__(self):
        return 160

    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.randn(16), torch.randn(())


if __name__ == "__main__":
    loader = DataLoader(Shards(), batch_size=4, num_workers=4, prefetch_factor=1,
                        persistent_workers=True)
    net = torch.nn.Linear(16, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    steps = 0
    for x, y in loader:
        t0 = time.perf_counter()
        loss = torch.nn.functional.mse_loss(net(x).squeeze(1), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(max(0.0, 0.040 - (time.perf_counter() - t0)))
        steps += 1
    print("steps", steps)
