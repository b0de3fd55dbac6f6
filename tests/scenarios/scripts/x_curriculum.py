"""A two-stage curriculum: epochs 0-1 train on short sequences from one DataLoader,
epochs 2-3 on long sequences from another (a different dataset and batch size), both
reading every sample from slow storage (num_workers=1): short samples cost 3 ms (batch
16, 48 ms per batch), long ones 6 ms (batch 8, 48 ms per batch), against a 6 ms step;
10 batches per epoch.

Truth: data-bound on read in both stages; the second loader is training, not validation.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class Sequences(Dataset):
    def __init__(self, length, latency, n):
        self.length, self.latency, self.n = length, latency, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.latency)
        return torch.randn(self.length, 4).mean(0)


if __name__ == "__main__":
    stages = [DataLoader(Sequences(16, 0.003, 160), batch_size=16, num_workers=1),
              DataLoader(Sequences(128, 0.006, 80), batch_size=8, num_workers=1)]
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(4):
        loader = stages[epoch // 2]
        n = 0
        for x in loader:
            t0 = time.perf_counter()
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.006 - (time.perf_counter() - t0)))
            n += 1
        print(f"epoch {epoch} stage {epoch // 2}: {n} batches")
