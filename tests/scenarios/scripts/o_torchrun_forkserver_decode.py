"""Launched the torchrun way: ``python -m torch.distributed.run --standalone
--nproc-per-node 2 o_torchrun_forkserver_decode.py``. Each rank joins a gloo group, wraps
its model in DDP, and reads a ``DistributedSampler`` part of the data with one DataLoader
worker started by ``forkserver`` (``multiprocessing_context="forkserver"``,
``persistent_workers=True``), calling ``sampler.set_epoch(epoch)`` each epoch. Each
sample is decoded in Python (about 6 ms of CPU, a measured spin); batch 8 (48 ms of CPU a
batch, each rank's worker on one of the 2 cores) against a 4 ms step; 2 epochs of 8
batches per rank. (A rank whose peer waits longer for its batch waits for it in the
gradient all-reduce, inside its step: the margin keeps each rank's own wait the larger.)

Truth: data-bound on decode in each rank (the launcher only waits for them). Rank 0
prints 16 steps whatever diagnose does.
"""

import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class Packed(Dataset):
    def __len__(self):
        return 128

    def __getitem__(self, i):
        end = time.thread_time() + 0.006  # unpacking a compressed record
        acc = i
        while time.thread_time() < end:
            acc = (acc * 31 + 7) % 1000003
        return torch.full((6,), float(acc % 5)), torch.tensor(i % 3)


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    ds = Packed()
    sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=1)
    loader = DataLoader(ds, batch_size=8, sampler=sampler, num_workers=1,
                        multiprocessing_context="forkserver", persistent_workers=True)
    model = DDP(torch.nn.Linear(6, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    steps = 0
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.004 - (time.perf_counter() - t0)))
            steps += 1
    dist.barrier()
    if rank == 0:
        print(f"rank {rank}/{world} steps {steps}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
