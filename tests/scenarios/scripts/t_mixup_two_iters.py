"""Mixup with a partner batch from a second live iterator of the same DataLoader:
``for x, y in loader:`` plus ``x2, y2 = next(partner)`` with ``partner = iter(loader)``
made again when spent; each iterator starts its own 2 workers (4 worker processes in
all). 8 ms of storage latency a sample, batch 8 (64 ms a batch, 32 ms with two
workers, both iterators fetching at once) against a 4 ms step; 2 epochs of 20 steps.
Starting the workers again each epoch costs 100-250 ms on a loaded two-core host, a
small part of an epoch's 640 ms of reads.

Truth: data-bound on read; a step is two batches (24 steps, not 48 draws).
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class Remote(Dataset):
    def __len__(self):
        return 160

    def __getitem__(self, i):
        time.sleep(0.008)
        x = torch.full((6,), float(i % 5))
        return x, torch.tensor([float(i % 2)])


if __name__ == "__main__":
    torch.set_num_threads(1)
    loader = DataLoader(Remote(), batch_size=8, shuffle=True, num_workers=2)
    model = torch.nn.Linear(6, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    partner = iter(loader)
    partners = 0

    def draw():
        global partner, partners
        try:
            return next(partner)
        except StopIteration:
            partner = iter(loader)
            partners += 1
            return next(partner)

    for epoch in range(2):
        n = 0
        for x, y in loader:
            x2, y2 = draw()
            t0 = time.perf_counter()
            lam = 0.7
            xm, ym = lam * x + (1 - lam) * x2, lam * y + (1 - lam) * y2
            loss = torch.nn.functional.binary_cross_entropy_with_logits(model(xm), ym)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.004 - (time.perf_counter() - t0)))
            n += 1
        print(f"epoch {epoch}: {n} steps, partner passes {partners}")
