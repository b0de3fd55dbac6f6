"""Early stopping by ``sys.exit(3)`` in the middle of the second epoch, from inside the
``for batch in loader`` loop, with persistent workers still running (num_workers=2).
Every sample 5 ms of storage latency, batch 8 (40 ms per batch, 20 ms with two workers)
against a 4 ms step; epoch 0 runs 16 batches, epoch 1 stops at its 9th.

Truth: data-bound on read; exit status 3, as without diagnose.
"""

import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Remote(Dataset):
    def __len__(self):
        return 128

    def __getitem__(self, i):
        time.sleep(0.005)
        return torch.randn(4)


if __name__ == "__main__":
    loader = DataLoader(Remote(), batch_size=8, num_workers=2, persistent_workers=True)
    model = torch.nn.Linear(4, 1)
    total = 0
    for epoch in range(3):
        for i, x in enumerate(loader):
            t0 = time.perf_counter()
            model(x).sum().backward()
            time.sleep(max(0.0, 0.004 - (time.perf_counter() - t0)))
            total += 1
            if epoch == 1 and i == 8:
                print(f"early stop: epoch {epoch} batch {i} total {total}", flush=True)
                sys.exit(3)
        print(f"epoch {epoch}: {i + 1} batches")
