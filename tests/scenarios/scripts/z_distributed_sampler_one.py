"""A script written for DDP run on one process: ``DistributedSampler(num_replicas=1,
rank=0)`` with ``set_epoch`` over ``ConcatDataset`` of two ``Subset``s of a
``random_split``; every sample is 4 ms of CPU work (decode), batch 8 (32 ms a batch),
2 workers (about 16 ms a batch between them on 2 cores, more on a busy host) against a
3 ms step; 2 epochs of 10 batches.

Truth: data-bound on decode.
"""

import time

import torch
from torch.utils.data import (
    ConcatDataset,
    DataLoader,
    Dataset,
    DistributedSampler,
    Subset,
    random_split,
)


def burn(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


class Images(Dataset):
    def __len__(self):
        return 120

    def __getitem__(self, i):
        burn(0.004)
        return torch.full((6,), float(i % 9)), torch.tensor(float(i % 2))


if __name__ == "__main__":
    torch.set_num_threads(1)
    a, b, _rest = random_split(Images(), [50, 30, 40], generator=torch.Generator().manual_seed(0))
    ds = ConcatDataset([Subset(a.dataset, a.indices), b])
    sampler = DistributedSampler(ds, num_replicas=1, rank=0, shuffle=True)
    dl = DataLoader(ds, batch_size=8, sampler=sampler, num_workers=2)
    model = torch.nn.Linear(6, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        n = 0
        for x, y in dl:
            t0 = time.perf_counter()
            loss = ((model(x).squeeze(1) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.003 - (time.perf_counter() - t0)))
            n += 1
        print(f"epoch {epoch}: {n} batches")
