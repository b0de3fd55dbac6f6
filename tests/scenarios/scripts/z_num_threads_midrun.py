"""A script that changes ``torch.set_num_threads`` mid-run: 1 thread for a warm-up
epoch, then 2 (``torch.set_num_threads(2)``) and back to 1 for the last; the loader is
in memory in the training process (batch 16, no workers) against a 25 ms step; 3 epochs
of 12 steps.

Truth: compute-bound.
"""

import time

import torch
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    torch.set_num_threads(1)
    dl = DataLoader(TensorDataset(torch.randn(192, 32), torch.randn(192)), batch_size=16, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for epoch, threads in enumerate((1, 2, 1)):
        torch.set_num_threads(threads)
        n = 0
        for x, y in dl:
            t0 = time.perf_counter()
            loss = ((model(x).squeeze(1) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.025 - (time.perf_counter() - t0)))
            n += 1
        print(f"epoch {epoch} threads {torch.get_num_threads()}: {n} batches")
