"""A script that skips interpreter teardown: after training it flushes its output and
calls ``os._exit(0)`` (no atexit handlers, no finalizers), a common way around slow
worker shutdown. DataLoader(num_workers=2), every sample 5 ms of storage latency, batch
8 (40 ms per batch, 20 ms with two workers) against a 4 ms step; 24 steps.

Truth: data-bound on read; exit status 0; the report is still written.
"""

import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Remote(Dataset):
    def __len__(self):
        return 192

    def __getitem__(self, i):
        time.sleep(0.005)
        return torch.randn(6)


if __name__ == "__main__":
    loader = DataLoader(Remote(), batch_size=8, num_workers=2)
    model = torch.nn.Linear(6, 1)
    steps = 0
    for x in loader:
        t0 = time.perf_counter()
        model(x).sum().backward()
        time.sleep(max(0.0, 0.004 - (time.perf_counter() - t0)))
        steps += 1
    print(f"steps {steps}")
    sys.stdout.flush()
    os._exit(0)
