"""The anti-pattern ``x, y = next(iter(loader))`` in every step: each call makes a new
iterator, which starts 2 worker processes and throws them away; samples are cheap; 10 ms
step.

Truth: data-bound: every step waits for two workers to start (tens of ms) although
fetching a batch costs about 1 ms.
"""

import time

import torch
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    data = TensorDataset(torch.randn(256, 8), torch.randn(256))
    loader = DataLoader(data, batch_size=16, shuffle=True, num_workers=2)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    done = 0
    while done < 30:
        x, y = next(iter(loader))
        t0 = time.perf_counter()
        loss = ((model(x).squeeze(1) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(max(0.0, 0.010 - (time.perf_counter() - t0)))
        done += 1
    print("steps", done)
