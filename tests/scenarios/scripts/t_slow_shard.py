"""One slow shard: a streaming ``IterableDataset`` over 4 shards of 40 records, dealt to
2 workers by ``get_worker_info()`` (worker w streams shards w, w + 2). Shard 3 sits on
a cold tier: 20 ms per record, 50 times the 0.4 ms of the others. Batch 8 (a slow batch
160 ms, a fast one 3 ms) against a 4 ms step; 2 epochs of 20 batches.

Truth: data-bound on read: each epoch waits about 0.8 s on shard 3's five batches
against 80 ms of steps; the other fifteen batches are ready.
"""

import time

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info


class Shards(IterableDataset):
    def __init__(self, shards=4, records=40):
        self.shards, self.records = shards, records

    def __iter__(self):
        info = get_worker_info()
        wid, n = (info.id, info.num_workers) if info is not None else (0, 1)
        for s in range(wid, self.shards, n):
            for r in range(self.records):
                time.sleep(0.020 if s == 3 else 0.0004)
                x = torch.full((6,), float(s))
                yield x, torch.tensor([float(r % 2)])


if __name__ == "__main__":
    torch.set_num_threads(1)
    loader = DataLoader(Shards(), batch_size=8, num_workers=2)
    model = torch.nn.Linear(6, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(2):
        n = 0
        for x, y in loader:
            t0 = time.perf_counter()
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.004 - (time.perf_counter() - t0)))
            n += 1
        print(f"epoch {epoch}: {n} batches")
