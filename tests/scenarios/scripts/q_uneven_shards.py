"""An ``IterableDataset`` over shard files of different sizes (52, 12, 44 and 20 records),
split between the workers with ``get_worker_info()`` the way the PyTorch docs show
(``shards[info.id::info.num_workers]``): worker 0 gets 96 records, worker 1 gets 32, so
worker 1 runs dry early and worker 0 streams the rest of the epoch alone. Each record
waits 5 ms for storage (a sleep); batch 8, 2 persistent workers, a 3 ms step; 2 epochs.

Truth: data-bound on read (40 ms of storage a batch per worker), and more workers would
not help: worker 0's shards are the slow part of the stream. The run is the same
batches per epoch whatever diagnose does.
"""

import time

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

SHARDS = [("shard-000", 52), ("shard-001", 12), ("shard-002", 44), ("shard-003", 20)]


class ShardStream(IterableDataset):
    def __iter__(self):
        info = get_worker_info()
        mine = SHARDS if info is None else SHARDS[info.id::info.num_workers]
        for name, count in mine:
            base = int(name.split("-")[1]) * 100
            for r in range(count):
                time.sleep(0.005)  # one record from object storage
                yield torch.full((12,), float((base + r) % 9)), torch.tensor(r % 2)


if __name__ == "__main__":
    torch.set_num_threads(1)
    net = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    loader = DataLoader(ShardStream(), batch_size=8, num_workers=2, persistent_workers=True)
    for epoch in range(2):
        n = rows = 0
        for x, y in loader:
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.003 - (time.perf_counter() - t0)))
            n += 1
            rows += len(y)
        print(f"epoch {epoch}: {n} batches, {rows} records")
