"""A hand-written parameter update (``p.data -= lr * p.grad``, no ``torch.optim``) and a
validation loader iterated after every epoch with autograd still on (no ``no_grad``,
no ``eval()``): the training loader is in memory, batch 16, in the training process,
with a 30 ms step (12 steps an epoch); the validation loader reads 48 samples, 5 ms of
storage latency each, batch 2, 1 worker, a 2 ms evaluation step (24 steps, more than
training); 3 epochs.

Truth: the training loader is compute-bound; the validation loader is its own line.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset


class Held(Dataset):
    def __len__(self):
        return 48

    def __getitem__(self, i):
        time.sleep(0.005)
        return torch.randn(8), torch.tensor(float(i % 3))


if __name__ == "__main__":
    torch.set_num_threads(1)
    train = DataLoader(TensorDataset(torch.randn(192, 8), torch.randn(192)), batch_size=16, shuffle=True)
    val = DataLoader(Held(), batch_size=2, num_workers=1)
    w = torch.zeros(8, requires_grad=True)
    b = torch.zeros(1, requires_grad=True)
    lr = 0.01
    for epoch in range(3):
        n = 0
        for x, y in train:
            t0 = time.perf_counter()
            loss = ((x @ w + b - y) ** 2).mean()
            loss.backward()
            for p in (w, b):
                p.data -= lr * p.grad
                p.grad.zero_()
            time.sleep(max(0.0, 0.030 - (time.perf_counter() - t0)))
            n += 1
        m, total = 0, 0.0
        for x, y in val:  # autograd on: a graph is built and thrown away
            t0 = time.perf_counter()
            total += float(((x @ w + b - y) ** 2).mean())
            time.sleep(max(0.0, 0.002 - (time.perf_counter() - t0)))
            m += 1
        print(f"epoch {epoch}: train {n} val {m}")
