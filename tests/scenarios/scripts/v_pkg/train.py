"""The package's entry point (``python -m v_pkg.train remote|memory``): batch 8, 1 worker
over the remote records (48 ms a batch) against a 4 ms step, or the in-memory table in
the training process against a 25 ms step; 15 steps an epoch (remote) or 30 (memory),
2 epochs.

Truth: remote is data-bound on read; memory is compute-bound.
"""

import sys
import time

import torch
from torch.utils.data import DataLoader

from .data import dataset


def main(kind):
    torch.set_num_threads(1)
    remote = kind == "remote"
    loader = DataLoader(dataset(kind), batch_size=8 if remote else 16, shuffle=True,
                        num_workers=1 if remote else 0)
    step_s = 0.004 if remote else 0.025
    model = torch.nn.Linear(6, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for epoch in range(2):
        n = 0
        for x, y in loader:
            t0 = time.perf_counter()
            loss = ((model(x).squeeze(1) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, step_s - (time.perf_counter() - t0)))
            n += 1
        print(f"{__name__} {kind} epoch {epoch}: {n} batches")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "remote")
