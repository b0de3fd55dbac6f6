"""A ``torch.compile``d model on CPU (backend from argv[1], default "aot_eager" so
no C compiler is needed): the first step traces and compiles (a second or more),
later steps take 25 ms (the device); in-memory data in the training process.

Truth: compute-bound: the compile in the first step is warm-up, not the data path
and not a stall.
"""

import sys
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    backend = sys.argv[1] if len(sys.argv) > 1 else "aot_eager"
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 1))
    cmodel = torch.compile(model, backend=backend)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    dl = DataLoader(TensorDataset(torch.randn(640, 32), torch.randn(640, 1)), batch_size=16,
                    shuffle=True)
    n = 0
    for x, y in dl:
        t0 = time.perf_counter()
        loss = torch.nn.functional.mse_loss(cmodel(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(max(0.0, 0.025 - (time.perf_counter() - t0)))
        n += 1
    print("steps", n)
