"""Keras style: ``model.fit(loader, epochs=3, steps_per_epoch=15)`` on a hand-written
``Model`` class. As in Keras, an "epoch" is ``steps_per_epoch`` steps, not one pass: the
DataLoader iterator carries on across epochs and is made again when it raises
``StopIteration`` (the loader has 20 batches, so passes and epochs do not line up).
1 worker, every sample 5 ms of storage latency, batch 8 (40 ms per batch) against a
6 ms step; 45 steps.
``torch.set_num_threads(1)`` in the training process (a small model).

Truth: data-bound on read.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class Records(Dataset):
    def __len__(self):
        return 160

    def __getitem__(self, i):
        time.sleep(0.005)
        return torch.full((10,), float(i % 5)), torch.tensor(float(i % 2))


class Model:
    def __init__(self):
        self.net = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
        self.opt = torch.optim.Adam(self.net.parameters(), lr=1e-3)

    def train_on_batch(self, x, y):
        t0 = time.perf_counter()
        loss = torch.nn.functional.mse_loss(self.net(x).squeeze(1), y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        time.sleep(max(0.0, 0.006 - (time.perf_counter() - t0)))
        return float(loss)

    def fit(self, data, epochs, steps_per_epoch):
        it = iter(data)
        passes = 1
        for epoch in range(epochs):
            logs = []
            for _ in range(steps_per_epoch):
                try:
                    x, y = next(it)
                except StopIteration:
                    it = iter(data)
                    passes += 1
                    x, y = next(it)
                logs.append(self.train_on_batch(x, y))
            print(f"Epoch {epoch + 1}/{epochs} - {len(logs)} steps - passes {passes}")


if __name__ == "__main__":
    torch.set_num_threads(1)  # a small model: the intra-op pool only spins on a busy host
    Model().fit(DataLoader(Records(), batch_size=8, shuffle=True, num_workers=1),
                epochs=3, steps_per_epoch=15)
