"""A ``while`` loop that builds each step's batch from two ``next(it)`` calls
(``torch.cat`` of two loader batches, a doubled batch without re-batching the dataset),
``it = iter(loader)`` again when spent. 1 worker, 4 ms of storage latency a sample,
batch 4 (16 ms a batch, 32 ms a step's pair) against a 4 ms step; 20 steps over a
15-batch loader.

Truth: data-bound on read.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class Recs(Dataset):
    def __len__(self):
        return 60

    def __getitem__(self, i):
        time.sleep(0.004)
        return torch.randn(6), torch.tensor(float(i % 2))


if __name__ == "__main__":
    torch.set_num_threads(1)
    dl = DataLoader(Recs(), batch_size=4, shuffle=True, num_workers=1)
    model = torch.nn.Linear(6, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    it, k, fetched = iter(dl), 0, 0
    while k < 20:
        parts = []
        while len(parts) < 2:
            try:
                parts.append(next(it))
            except StopIteration:
                it = iter(dl)
        fetched += 2
        x = torch.cat([p[0] for p in parts])
        y = torch.cat([p[1] for p in parts])
        t0 = time.perf_counter()
        loss = ((model(x).squeeze(1) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(max(0.0, 0.004 - (time.perf_counter() - t0)))
        k += 1
    print(f"steps {k} batches {fetched}")
