"""A quick evaluation every 10 steps on the SAME DataLoader object: inside
``for x, y in loader:`` the loop runs ``for j, (xv, yv) in enumerate(loader)`` under
``torch.no_grad()`` and breaks after 2 batches, a second live iterator of one loader
nested in the first (a "sanity eval on a few training batches" habit). 1 worker, every
sample 5 ms of storage latency, batch 8 (40 ms a batch) against a 4 ms step; 2 epochs
of 20 steps, 2 evaluations an epoch.

Truth: data-bound on read (the training loader delivers a batch every ~40 ms against a
4 ms step; the evaluations wait for their own worker's start and two batches). The run
is 40 training steps and 8 evaluation batches whatever diagnose does.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class Remote(Dataset):
    def __len__(self) -> int:
        return 160

    def __getitem__(self, i):
        time.sleep(0.005)
        return torch.full((6,), float(i % 5)), torch.tensor(i % 3)


if __name__ == "__main__":
    torch.set_num_threads(1)
    net = torch.nn.Linear(6, 3)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    loader = DataLoader(Remote(), batch_size=8, shuffle=True, num_workers=1)
    for epoch in range(2):
        steps = evals = 0
        for x, y in loader:
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.004 - (time.perf_counter() - t0)))
            steps += 1
            if steps % 10 == 0:
                with torch.no_grad():
                    for j, (xv, yv) in enumerate(loader):
                        torch.nn.functional.cross_entropy(net(xv), yv)
                        evals += 1
                        if j == 1:
                            break
        print(f"epoch {epoch}: {steps} steps, {evals} eval batches")
