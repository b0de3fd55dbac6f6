"""Episodic (meta-learning) training: every step draws two batches from the same
iterator, a support set and a query set (``support = draw(); query = draw()``), and the
helper makes a new iterator when the old one is spent, even between the two draws.
1 worker, every sample 4 ms of storage latency, batch 5 (20 ms per batch, 40 ms per
step's pair) against a 6 ms step; 25 steps over a 20-batch loader.
``torch.set_num_threads(1)`` in the training process (a small model).

Truth: data-bound on read.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class Episodes(Dataset):
    def __len__(self):
        return 100

    def __getitem__(self, i):
        time.sleep(0.004)
        return torch.randn(6), i % 4


class Batches:
    def __init__(self, loader):
        self.loader, self.it, self.passes = loader, iter(loader), 1

    def draw(self):
        try:
            return next(self.it)
        except StopIteration:
            self.it, self.passes = iter(self.loader), self.passes + 1
            return next(self.it)


if __name__ == "__main__":
    torch.set_num_threads(1)  # a small model: the intra-op pool only spins on a busy host
    source = Batches(DataLoader(Episodes(), batch_size=5, shuffle=True, num_workers=1))
    net = torch.nn.Linear(6, 4)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for _step in range(25):
        (xs, ys), (xq, yq) = source.draw(), source.draw()
        t0 = time.perf_counter()
        protos = torch.stack([xs[ys == c].mean(0) if (ys == c).any() else torch.zeros(6) for c in range(4)])
        loss = torch.nn.functional.cross_entropy(net(xq) + xq @ protos.T, yq)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(max(0.0, 0.006 - (time.perf_counter() - t0)))
    print(f"steps 25 batches 50 passes {source.passes}")
