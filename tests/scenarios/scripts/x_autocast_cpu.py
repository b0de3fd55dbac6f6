"""Mixed precision on a CPU: every step runs under ``torch.autocast("cpu",
dtype=torch.bfloat16)``, the loss is scaled by hand, gradients clipped; the step is
padded to 30 ms (a device that takes 30 ms). The data is a TensorDataset in memory,
batch 32, num_workers=0 (well under a millisecond per batch). 3 epochs of 15 steps.

Truth: compute-bound, almost no waiting on data.
"""

import time

import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X = torch.randn(480, 64)
Y = (X.sum(1) > 0).long()

if __name__ == "__main__":
    loader = DataLoader(TensorDataset(X, Y), batch_size=32, shuffle=True, drop_last=True)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(3):
        steps = 0
        for xb, yb in loader:
            t0 = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = model(xb)
                loss = torch.nn.functional.cross_entropy(logits.float(), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            time.sleep(max(0.0, 0.030 - (time.perf_counter() - t0)))
            steps += 1
        print(f"epoch {epoch}: {steps} steps, bf16 {logits.dtype == torch.bfloat16}")
