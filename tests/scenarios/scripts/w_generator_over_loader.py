"""A generator that wraps a DataLoader (the ``def cycle(dl): while True: for b in dl:
yield b`` idiom) and moves batches to the device; the loop takes ``next(gen)`` for
``total_steps``; the DataLoader has 1 worker, 6 ms of storage latency per sample,
batch 6 (36 ms per batch) against a 5 ms step; the dataset is 30 samples, so the
generator restarts the loader every 5 batches.

Truth: data-bound on read.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self):
        return 30

    def __getitem__(self, i):
        time.sleep(0.006)
        return torch.randn(5)


def cycle(dl, device):
    while True:
        for batch in dl:
            yield batch.to(device)


if __name__ == "__main__":
    dl = DataLoader(Slow(), batch_size=6, shuffle=True, num_workers=1, persistent_workers=True)
    gen = cycle(dl, "cpu")
    model = torch.nn.Linear(5, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    total_steps = 24
    done = 0
    while done < total_steps:
        x = next(gen)
        t0 = time.perf_counter()
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        time.sleep(max(0.0, 0.005 - (time.perf_counter() - t0)))
        done += 1
    print("steps", done)
