"""Gradient accumulation under DDP the way the PyTorch docs write it, launched with
``python -m torch.distributed.run --standalone --nproc-per-node 2``: gloo, a DDP model,
``with model.no_sync():`` for the first 3 of every 4 micro-batches (no all-reduce) and a
synchronised backward on the 4th. Each rank has its own DataLoader (2 workers) over a
``DistributedSampler(shuffle=False)`` (``persistent_workers=True``) that deals sample
``i`` to rank ``i % 2``: odd
samples sit on slow storage (6 ms each, a sleep), even ones in memory, so rank 1's
workers need about 48 ms a batch of 8 (24 ms with two) while rank 0's loader is instant
and rank 0 waits for rank 1 in the all-reduce of every 4th backward (its steps look
long). A 3 ms micro-step; 2 epochs of 16 micro-batches per rank (8 optimizer updates).

Truth: the job is data-bound on read (rank 1's loader); rank 0's long synchronised
backward is the all-reduce waiting for rank 1, not its own compute. Rank 0 prints 32
micro-batches and 8 updates whatever diagnose does.
"""

import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class HalfRemote(Dataset):
    def __len__(self):
        return 256

    def __getitem__(self, i):
        if i % 2:
            time.sleep(0.006)  # the slow half of the data
        return torch.full((6,), float(i % 4)), torch.tensor([float(i % 3)])


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    ds = HalfRemote()
    sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=False)
    loader = DataLoader(ds, batch_size=8, sampler=sampler, num_workers=2,
                        persistent_workers=True)
    model = DDP(torch.nn.Linear(6, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    accum, micro, updates = 4, 0, 0
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for i, (x, y) in enumerate(loader):
            t0 = time.perf_counter()
            if (i + 1) % accum:
                with model.no_sync():
                    loss = torch.nn.functional.mse_loss(model(x), y) / accum
                    loss.backward()
            else:
                loss = torch.nn.functional.mse_loss(model(x), y) / accum
                loss.backward()
                opt.step()
                opt.zero_grad()
                updates += 1
            time.sleep(max(0.0, 0.003 - (time.perf_counter() - t0)))
            micro += 1
    dist.barrier()
    if rank == 0:
        print(f"rank 0 micro-batches {micro} updates {updates}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
