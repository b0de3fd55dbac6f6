"""A second-order optimizer with a closure: ``torch.optim.LBFGS(max_iter=4)`` and
``opt.step(closure)``, where the closure runs the forward and backward pass and LBFGS
calls it up to five times per batch (several ``backward()`` calls and one optimizer
step per batch). 1 worker, 5 ms of storage latency a sample, batch 8 (40 ms a batch)
against a step padded to 5 ms; 2 epochs of 12 batches.

Truth: data-bound on read (one batch is one step, however many backward passes it takes).
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class Remote(Dataset):
    def __len__(self):
        return 96

    def __getitem__(self, i):
        time.sleep(0.005)  # storage latency
        x = torch.full((6,), float(i % 5) / 5)
        return x, x.sum(0, keepdim=True)


if __name__ == "__main__":
    torch.set_num_threads(1)
    loader = DataLoader(Remote(), batch_size=8, shuffle=True, num_workers=1)
    model = torch.nn.Linear(6, 1)
    opt = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=4)
    for epoch in range(2):
        n = 0
        for x, y in loader:
            t0 = time.perf_counter()

            def closure(x=x, y=y):
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                return loss

            opt.step(closure)
            time.sleep(max(0.0, 0.005 - (time.perf_counter() - t0)))
            n += 1
        print(f"epoch {epoch}: {n} batches")
