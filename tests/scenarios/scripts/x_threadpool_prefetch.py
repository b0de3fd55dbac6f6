"""The user's own prefetching: a ``concurrent.futures.ThreadPoolExecutor(max_workers=1)``
fetches the next batch (``pool.submit(next, it, None)``) while the current one trains,
so the DataLoader iterator is advanced on the pool's thread, never on the main thread.
num_workers=1, every sample 5 ms of storage latency, batch 8 (40 ms per batch) against
an 8 ms step; 2 epochs of 15 batches.

Truth: data-bound on read (the prefetch hides one step of 40 ms, no more).
"""

import time
from concurrent.futures import ThreadPoolExecutor

import torch
from torch.utils.data import DataLoader, Dataset


class Remote(Dataset):
    def __len__(self):
        return 120

    def __getitem__(self, i):
        time.sleep(0.005)
        return torch.randn(12), torch.randint(0, 3, ())


if __name__ == "__main__":
    loader = DataLoader(Remote(), batch_size=8, num_workers=1)
    model = torch.nn.Linear(12, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with ThreadPoolExecutor(max_workers=1) as pool:
        for epoch in range(2):
            it = iter(loader)
            fut = pool.submit(next, it, None)
            n = 0
            while True:
                batch = fut.result()
                if batch is None:
                    break
                fut = pool.submit(next, it, None)
                t0 = time.perf_counter()
                x, y = batch
                loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                time.sleep(max(0.0, 0.008 - (time.perf_counter() - t0)))
                n += 1
            print(f"epoch {epoch}: {n} batches")
