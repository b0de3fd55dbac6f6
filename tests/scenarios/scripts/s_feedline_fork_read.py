"""feedline.Loader with 2 process workers (forked where safe) over a dataset whose
``__getitem__`` waits on storage (8 ms of latency a sample, a sleep: I/O, not CPU),
used the way an epoch loop uses a DataLoader: ``loader.set_epoch(e)`` and
``for batch in loader``; batch 8 (64 ms a batch, about 32 ms between the two workers)
against a 4 ms step; 2 epochs of 12 batches.

Truth: data-bound on read (stall about 0.8); read is I/O, so more workers than cores
would help. The run is 24 steps whatever diagnose does.
"""

import time

import numpy as np
import torch

import feedline


class Objects:
    def __len__(self) -> int:
        return 96

    def __getitem__(self, i: int) -> dict:
        time.sleep(0.008)  # an object-store GET
        return {"x": np.full((8,), float(i % 5), dtype=np.float32), "y": np.int64(i % 2)}


if __name__ == "__main__":
    torch.set_num_threads(1)
    loader = feedline.Loader(Objects(), batch_size=8, workers=2, worker_type="process",
                             shuffle=True)
    net = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for epoch in range(2):
        loader.set_epoch(epoch)
        n = 0
        for batch in loader:
            t0 = time.perf_counter()
            x, y = torch.as_tensor(batch["x"]), torch.as_tensor(batch["y"])
            loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.004 - (time.perf_counter() - t0)))
            n += 1
        print(f"epoch {epoch}: {n} batches")
