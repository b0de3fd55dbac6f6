"""Gradient checkpointing to fit a deep model: ``torch.utils.checkpoint.checkpoint_sequential``
over 16 blocks in 4 segments, so the backward pass runs each segment's forward again
(the backward is about twice the forward). Real CPU compute (one thread), padded to at
least 40 ms a step; the data are small tensors in memory, 1 worker; 2 epochs of 12
batches.

Truth: compute-bound: the long backward is the model's own time. The run is 24 steps
whatever diagnose does.
"""

import time

import torch
from torch.utils.checkpoint import checkpoint_sequential
from torch.utils.data import DataLoader, TensorDataset


def block() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.LayerNorm(256))


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    loader = DataLoader(TensorDataset(torch.randn(768, 256), torch.randint(0, 8, (768,))),
                        batch_size=32, shuffle=True, num_workers=1)
    body = torch.nn.Sequential(*[block() for _ in range(16)])
    head = torch.nn.Linear(256, 8)
    opt = torch.optim.AdamW([*body.parameters(), *head.parameters()], lr=1e-4)
    for epoch in range(2):
        n = 0
        for x, y in loader:
            t0 = time.perf_counter()
            x.requires_grad_(True)
            h = checkpoint_sequential(body, 4, x, use_reentrant=False)
            loss = torch.nn.functional.cross_entropy(head(h), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.040 - (time.perf_counter() - t0)))
            n += 1
            if n == 12:
                break
        print(f"epoch {epoch}: {n} steps")
