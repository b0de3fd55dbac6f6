"""Config from argv (argparse) and the environment (``EPOCHS``), a loop that ends with
``sys.exit(3)`` (the script's way of saying "converged early"); 1 worker, every sample
3 ms of storage latency, batch from ``--batch-size`` (8: 24 ms per batch) against a
4 ms step.

Truth: data-bound on read; exit status 3, as without diagnose.
"""

import argparse
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self):
        return 96

    def __getitem__(self, i):
        time.sleep(0.003)
        return torch.ones(3) * i


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--lr", type=float, default=0.1)
    args = p.parse_args()
    epochs = int(os.environ.get("EPOCHS", "1"))
    dl = DataLoader(Slow(), batch_size=args.batch_size, num_workers=1)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr * 1e-4)
    n = 0
    for _ in range(epochs):
        for x in dl:
            t0 = time.perf_counter()
            model(x).mean().backward()
            opt.step()
            opt.zero_grad()
            time.sleep(max(0.0, 0.004 - (time.perf_counter() - t0)))
            n += 1
    print(f"bs={args.batch_size} epochs={epochs} steps={n}")
    sys.exit(3)
