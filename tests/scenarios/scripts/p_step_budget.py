"""A step budget over a small loader, the way nanoGPT-style and RL-from-demonstrations
scripts write it: ``for step in range(max_steps)`` with ``batch = next(it)`` and a fresh
``it = iter(loader)`` on ``StopIteration`` (the loader holds 6 batches; 45 steps is 7.5
passes). Persistent workers (2), samples in memory (cheap); a 50 ms step.

Truth: compute-bound (the workers have each next batch ready; a new pass costs no
worker start). The run is 45 steps whatever diagnose does.
"""

import time

import torch
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    data = TensorDataset(torch.randn(96, 12), torch.randn(96, 1))
    loader = DataLoader(data, batch_size=16, shuffle=True, num_workers=2, persistent_workers=True)
    net = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    max_steps, passes, done = 45, 1, 0
    it = iter(loader)
    for step in range(max_steps):
        try:
            x, y = next(it)
        except StopIteration:
            it = iter(loader)
            passes += 1
            x, y = next(it)
        t0 = time.perf_counter()
        loss = torch.nn.functional.mse_loss(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(max(0.0, 0.050 - (time.perf_counter() - t0)))
        done = step + 1
    print(f"steps {done} passes {passes}")
