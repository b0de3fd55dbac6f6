"""A training function decorated with ``@torch.no_grad()`` (copied from an evaluation
helper) that turns autograd back on for the step with ``with torch.enable_grad():``, so
the whole training pass of the loader runs under no_grad and only the step has grad;
a validation loader (its own worker) is iterated under the same decorator, no
``enable_grad``. Training: 1 worker, every sample 5 ms of storage latency, batch 8
(40 ms a batch) against a 4 ms step; 2 epochs of 12 batches, each followed by 3
validation batches.

Truth: data-bound on read (the training loader delivers a batch every ~40 ms against a
4 ms step); the training loader is the one whose batches reach ``backward()`` and
``opt.step()`` though its pass runs under no_grad. The run is 24 training steps and 6
validation batches whatever diagnose does.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class Remote(Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        time.sleep(0.005)
        return torch.full((6,), float(i % 5)), torch.tensor(i % 3)


@torch.no_grad()
def train_one_epoch(net, opt, loader) -> int:
    n = 0
    for x, y in loader:
        with torch.enable_grad():
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.004 - (time.perf_counter() - t0)))
        n += 1
    return n


@torch.no_grad()
def validate(net, loader) -> int:
    n = 0
    for x, y in loader:
        torch.nn.functional.cross_entropy(net(x), y)
        n += 1
    return n


if __name__ == "__main__":
    torch.set_num_threads(1)
    net = torch.nn.Linear(6, 3)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    train = DataLoader(Remote(96), batch_size=8, shuffle=True, num_workers=1)
    val = DataLoader(Remote(24), batch_size=8, num_workers=1)
    for epoch in range(2):
        n = train_one_epoch(net, opt, train)
        v = validate(net, val)
        print(f"epoch {epoch}: {n} steps, {v} val batches")
