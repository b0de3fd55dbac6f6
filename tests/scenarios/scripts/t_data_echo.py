"""Data echoing: every batch the loader hands out is trained on three times (three
optimizer steps of 5 ms on the same batch, ``for _ in range(echo)``), a way to use the
device while slow input catches up. 1 worker, 8 ms of storage latency a sample, batch 8
(64 ms a batch) against 3 x 5 ms of steps a batch; 16 batches, 48 updates.

Truth: data-bound on read: the loop waits about three quarters of the time, even with
three steps per batch.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class Remote(Dataset):
    def __len__(self):
        return 128

    def __getitem__(self, i):
        time.sleep(0.008)
        x = torch.full((8,), float(i % 3))
        return x, x.mean(0, keepdim=True)


if __name__ == "__main__":
    torch.set_num_threads(1)
    loader = DataLoader(Remote(), batch_size=8, shuffle=True, num_workers=1)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = updates = 0
    for x, y in loader:
        batches += 1
        for _ in range(3):  # echo factor 3
            t0 = time.perf_counter()
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            updates += 1
            time.sleep(max(0.0, 0.005 - (time.perf_counter() - t0)))
    print(f"batches {batches} updates {updates}")
