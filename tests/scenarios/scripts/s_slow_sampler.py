"""A custom ``Sampler`` that is slow: its ``__iter__`` asks an index service for the
order one index at a time (3 ms of storage latency each, a sleep), and a sampler runs in
the training process, not in the workers, whatever ``num_workers`` is. 2 workers with
cheap items (an in-memory row), batch 8 (24 ms of sampler time a batch, in the loop's
own process) against a 4 ms step; 2 epochs of 15 batches.

Truth: data-bound: the loop waits about 24 ms a batch for the sampler (stall about
0.7-0.9); more workers cannot help, the sampler is not theirs. The run is 30 steps
whatever diagnose does.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset, Sampler


class Rows(Dataset):
    def __len__(self) -> int:
        return 120

    def __getitem__(self, i):
        return torch.full((4,), float(i % 7)), torch.tensor(i % 2)


class IndexService(Sampler):
    def __init__(self, n: int) -> None:
        self.n = n
        self.epoch = 0

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        g = torch.Generator().manual_seed(self.epoch)
        for i in torch.randperm(self.n, generator=g).tolist():
            time.sleep(0.003)  # one round trip to the index service per index
            yield i


if __name__ == "__main__":
    torch.set_num_threads(1)
    sampler = IndexService(120)
    loader = DataLoader(Rows(), batch_size=8, sampler=sampler, num_workers=2,
                        persistent_workers=True)
    net = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for epoch in range(2):
        sampler.epoch = epoch
        n = 0
        for x, y in loader:
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.004 - (time.perf_counter() - t0)))
            n += 1
        print(f"epoch {epoch}: {n} batches")
