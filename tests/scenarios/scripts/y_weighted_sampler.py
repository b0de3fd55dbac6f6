"""Class imbalance handled with ``WeightedRandomSampler``: 90% of the samples are a
common class kept in memory, 10% a rare class whose records are fetched from slow
storage (30 ms each). Weights of 1/class-count draw both classes about equally, so about
half of every batch is rare: batch 8, about 120 ms of reads per batch, 2 workers (about
60 ms per batch between them) against an 8 ms step; 2 epochs of 20 batches
(``num_samples=160``, a seeded generator).
``torch.set_num_threads(1)`` in the training process (a small model).

Truth: data-bound on read (what the sampler draws is what costs).
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset, WeightedRandomSampler


class Imbalanced(Dataset):
    def __init__(self):
        self.labels = [1 if i % 10 == 0 else 0 for i in range(1000)]

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        if self.labels[i]:
            time.sleep(0.030)  # the rare class lives on the archive tier
        return torch.full((12,), float(self.labels[i])), self.labels[i]


if __name__ == "__main__":
    torch.set_num_threads(1)  # a small model: the intra-op pool only spins on a busy host
    ds = Imbalanced()
    counts = torch.bincount(torch.tensor(ds.labels)).float()
    weights = (1.0 / counts)[torch.tensor(ds.labels)]
    sampler = WeightedRandomSampler(weights, num_samples=160, replacement=True,
                                    generator=torch.Generator().manual_seed(0))
    loader = DataLoader(ds, batch_size=8, sampler=sampler, num_workers=2)
    net = torch.nn.Linear(12, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for epoch in range(2):
        n = 0
        for x, y in loader:
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.008 - (time.perf_counter() - t0)))
            n += 1
        print(f"epoch {epoch}: {n} batches")
