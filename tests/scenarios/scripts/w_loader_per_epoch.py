"""A new DataLoader built inside the epoch loop (a curriculum: each epoch draws a
different subset, so the tutorial's author rebuilds the loader every epoch); 5 epochs
of 8 batches; 1 worker, each sample 5 ms of storage latency, batch 8 (40 ms per batch)
against a 6 ms step.

Truth: data-bound on read: one training data path, rebuilt five times (not five loaders
of which four are "other").
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset, Subset


class Slow(Dataset):
    def __len__(self):
        return 400

    def __getitem__(self, i):
        time.sleep(0.005)
        return torch.full((4,), float(i % 9)), torch.tensor(float(i % 2))


if __name__ == "__main__":
    torch.set_num_threads(1)
    ds = Slow()
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for epoch in range(5):
        subset = Subset(ds, list(range(epoch * 64, epoch * 64 + 64)))  # harder samples later
        loader = DataLoader(subset, batch_size=8, shuffle=True, num_workers=1)
        n = 0
        for x, y in loader:
            t0 = time.perf_counter()
            loss = ((model(x).squeeze(1) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.006 - (time.perf_counter() - t0)))
            n += 1
        print(f"epoch {epoch}: {n} batches")
