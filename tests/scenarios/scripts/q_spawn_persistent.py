"""Loaders made the way a script that must also run on macOS makes them:
``multiprocessing_context="spawn"`` and ``persistent_workers=True`` for both the training
loader and the validation loader (1 worker each: the data is small), so the workers import
the script and torch once and live for the whole run; ``set_epoch``-style reshuffling through a
seeded ``RandomSampler`` generator. Samples are small arrays normalised in the workers
(well under a millisecond a batch); the step is 40 ms (a sleep pads the real one: a GPU's
time); 3 epochs of 24 batches, a validation pass of 3 batches after each.

Truth: compute-bound (the spawned workers' start-up before the first batch is warm-up,
not a stall). The run is 72 training steps whatever diagnose does.
"""

import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler


class Frames(Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        a = np.arange(24, dtype=np.float32) * (i % 11)
        a = (a - a.mean()) / (a.std() + 1e-6)
        return torch.from_numpy(a), torch.tensor(i % 3)


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    train = DataLoader(Frames(384), batch_size=16, sampler=RandomSampler(Frames(384), generator=gen),
                       num_workers=1, persistent_workers=True, multiprocessing_context="spawn")
    val = DataLoader(Frames(48), batch_size=16, num_workers=1, persistent_workers=True,
                     multiprocessing_context="spawn")
    net = torch.nn.Linear(24, 3)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    for epoch in range(3):
        net.train()
        n = 0
        for x, y in train:
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.040 - (time.perf_counter() - t0)))
            n += 1
        net.eval()
        with torch.no_grad():
            v = sum(1 for x, _ in val if net(x) is not None)
        print(f"epoch {epoch}: {n} steps, val {v} batches")
