"""A hurried researcher's loop: ``print(..., flush=True)`` of a long status line every
step, ``num_workers=2``, cheap samples, 30 ms step, 80 steps.

Truth: compute-bound; the script's stdout is unchanged line for line.
"""

import time

import torch
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    dl = DataLoader(TensorDataset(torch.randn(640, 10), torch.randn(640)), batch_size=8,
                    num_workers=2)
    model = torch.nn.Linear(10, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for i, (x, y) in enumerate(dl):
        t0 = time.perf_counter()
        loss = ((model(x).squeeze(1) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(max(0.0, 0.030 - (time.perf_counter() - t0)))
        print(f"step {i:04d} | lr {opt.param_groups[0]['lr']:.2e} | batch {tuple(x.shape)} | "
              + "#" * (i % 60), flush=True)
    print("finished", i + 1)
