"""A dataset that caches decoded samples in RAM: epoch 0 reads every sample from slow
storage (6 ms each, batch 8: 48 ms per batch), later epochs come from the cache
(num_workers=0, so the cache lives in the training process); 10 ms step; 3 epochs of
12 batches.

Truth: the first epoch is data-bound on read (48 ms of reads per 10 ms step), epochs 1
and 2 are compute-bound. Overall: 12 x 58 ms (read-bound) + 24 x 10 ms: about 70% of the
time waiting, so data-bound on read, and the report should say that later passes
did not wait (the cache works: the stall is the first epoch).
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class CachedDataset(Dataset):
    def __init__(self, n):
        self.n = n
        self.cache = {}

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i not in self.cache:
            time.sleep(0.006)
            self.cache[i] = torch.full((8,), float(i))
        return self.cache[i]


if __name__ == "__main__":
    dl = DataLoader(CachedDataset(96), batch_size=8, shuffle=True)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for epoch in range(3):
        t_epoch = time.perf_counter()
        n = 0
        for x in dl:
            t0 = time.perf_counter()
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.010 - (time.perf_counter() - t0)))
            n += 1
        print(f"epoch {epoch}: {n} batches")
