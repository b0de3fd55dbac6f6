"""Each epoch is ``itertools.chain(clean, noisy)``: first 10 batches from an in-memory
loader, then 10 from a loader that reads every sample from slow storage (4 ms per
sample, batch 8: 32 ms per batch, num_workers=0), against a 5 ms step; 2 epochs.
Both are training data: half the steps wait 32 ms, half none.

Truth: data-bound on read (over the run, the wait is about 60% of the time).
"""

import itertools
import time

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset


class Noisy(Dataset):
    def __len__(self):
        return 80

    def __getitem__(self, i):
        time.sleep(0.004)
        return torch.randn(5), torch.tensor(float(i % 2))


if __name__ == "__main__":
    clean = DataLoader(TensorDataset(torch.randn(80, 5), torch.ones(80)), batch_size=8)
    noisy = DataLoader(Noisy(), batch_size=8)
    model = torch.nn.Linear(5, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(2):
        n = 0
        for x, y in itertools.chain(clean, noisy):
            t0 = time.perf_counter()
            loss = torch.nn.functional.mse_loss(model(x).squeeze(1), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.005 - (time.perf_counter() - t0)))
            n += 1
        print(f"epoch {epoch}: {n} steps")
