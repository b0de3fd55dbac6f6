"""A loader whose ``__len__`` lies: an IterableDataset of log files claims 100 records
(``__len__``, used for a progress total and an LR schedule) but streams 48; each record
costs 5 ms of storage latency; batch 8, 1 worker, 2 epochs; 6 ms step.

Truth: data-bound on read (40 ms of reads per batch against a 6 ms step); the script sees
6 batches per epoch (not the 13 len(loader) promises).
"""

import time

import torch
from torch.utils.data import DataLoader, IterableDataset


class LogRecords(IterableDataset):
    def __len__(self):
        return 100  # a stale count from an old manifest

    def __iter__(self):
        for i in range(48):
            time.sleep(0.005)
            yield torch.tensor([float(i), float(i % 5)])


if __name__ == "__main__":
    dl = DataLoader(LogRecords(), batch_size=8, num_workers=1)
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LinearLR(opt, total_iters=len(dl) * 2)
    for epoch in range(2):
        seen = 0
        for x in dl:
            t0 = time.perf_counter()
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            time.sleep(max(0.0, 0.006 - (time.perf_counter() - t0)))
            seen += 1
        print(f"epoch {epoch}: {seen} of {len(dl)} batches")
