"""``accelerate`` style: ``for step, batch in enumerate(dl, start=1)`` with
``if step % accum == 0`` optimizer steps, ``.to(device, non_blocking=True)`` on a
``pin_memory=True`` loader (on a CPU-only host: nothing to pin for), and
``torch.cuda.synchronize()`` guarded by availability; 2 workers, cheap in-memory
samples (about 1 ms per batch), each micro-step 50 ms (the device).

Truth: compute-bound; no advice about pinning on a host without a GPU.
"""

import time

import torch
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    ds = TensorDataset(torch.randn(480, 64), torch.randn(480))
    dl = DataLoader(ds, batch_size=16, shuffle=True, num_workers=2, pin_memory=True,
                    drop_last=True)
    model = torch.nn.Linear(64, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    accum = 4
    updates = 0
    for step, batch in enumerate(dl, start=1):
        x, y = (t.to(device, non_blocking=True) for t in batch)
        t0 = time.perf_counter()
        loss = ((model(x).squeeze(1) - y) ** 2).mean() / accum
        loss.backward()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        time.sleep(max(0.0, 0.050 - (time.perf_counter() - t0)))
        if step % accum == 0:
            opt.step()
            opt.zero_grad(set_to_none=True)
            updates += 1
    print(f"micro-batches {step} updates {updates}")
