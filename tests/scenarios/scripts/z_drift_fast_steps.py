"""Costs that drift: the step is slow at first (40 ms for the first 8 steps, standing in
for a warm-up of kernels and caches) and then fast (3 ms); the data cost is steady: every
sample 3 ms of storage latency, batch 8 (24 ms a batch), 1 worker; 48 steps. The early
steps hide the data path, the later 40 wait about 21 ms each.

Truth: data-bound on read.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self):
        return 384

    def __getitem__(self, i):
        time.sleep(0.003)
        return torch.full((6,), float(i % 3)), torch.tensor(float(i % 2))


if __name__ == "__main__":
    torch.set_num_threads(1)
    dl = DataLoader(Slow(), batch_size=8, num_workers=1)
    model = torch.nn.Linear(6, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    steps = 0
    for x, y in dl:
        t0 = time.perf_counter()
        loss = ((model(x).squeeze(1) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        cost = 0.040 if steps < 8 else 0.003
        time.sleep(max(0.0, cost - (time.perf_counter() - t0)))
        steps += 1
    print(f"steps {steps}")
