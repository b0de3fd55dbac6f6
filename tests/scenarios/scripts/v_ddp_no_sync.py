"""Gradient accumulation with DDP's ``no_sync()``: a real ``DistributedDataParallel`` over
a one-process gloo group (a ``file://`` rendezvous in a temporary folder); three of
every four micro-batches run under ``model.no_sync()`` (no all-reduce), the fourth
syncs and steps the optimizer. 2 workers, 5 ms of storage latency a sample, batch 8
(40 ms a batch, 20 ms between the workers) against a 3 ms micro-step; 2 epochs of 12.

Truth: data-bound on read.
"""

import contextlib
import os
import tempfile
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset


class Shards(Dataset):
    def __len__(self):
        return 96

    def __getitem__(self, i):
        time.sleep(0.005)
        return torch.full((6,), float(i % 5)), torch.tensor(float(i % 2))


if __name__ == "__main__":
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method="file://" + os.path.join(tmp, "rdzv"),
                                rank=0, world_size=1)
        model = DistributedDataParallel(torch.nn.Linear(6, 1))
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        loader = DataLoader(Shards(), batch_size=8, shuffle=True, num_workers=2)
        accum, updates = 4, 0
        for epoch in range(2):
            n = 0
            for i, (x, y) in enumerate(loader):
                t0 = time.perf_counter()
                sync = (i + 1) % accum == 0
                with contextlib.nullcontext() if sync else model.no_sync():
                    loss = ((model(x).squeeze(1) - y) ** 2).mean() / accum
                    loss.backward()
                if sync:
                    opt.step()
                    opt.zero_grad()
                    updates += 1
                time.sleep(max(0.0, 0.003 - (time.perf_counter() - t0)))
                n += 1
            print(f"epoch {epoch}: {n} micro-batches")
        print(f"updates {updates}")
        dist.destroy_process_group()
