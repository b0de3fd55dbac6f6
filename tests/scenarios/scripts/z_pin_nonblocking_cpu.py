"""GPU habits on a CPU-only host: ``pin_memory=True`` and ``x.to(device,
non_blocking=True)`` with ``device = "cuda" if available else "cpu"``; 2 workers over an
in-memory dataset (about 0.1 ms a sample, batch 8) against a 40 ms step; 40 steps.

Truth: compute-bound.
"""

import time

import torch
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    torch.set_num_threads(1)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dl = DataLoader(TensorDataset(torch.randn(320, 16), torch.randn(320)), batch_size=8,
                    shuffle=True, num_workers=2, pin_memory=True)
    model = torch.nn.Linear(16, 1).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    steps = 0
    for x, y in dl:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        t0 = time.perf_counter()
        loss = ((model(x).squeeze(1) - y) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        time.sleep(max(0.0, 0.040 - (time.perf_counter() - t0)))
        steps += 1
    print(f"steps {steps}")
