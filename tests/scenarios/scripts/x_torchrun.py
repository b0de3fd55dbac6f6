"""Launched the torchrun way: ``python -m torch.distributed.run --standalone
--nproc-per-node 2 x_torchrun.py``. Each rank reads RANK/WORLD_SIZE/LOCAL_RANK from the
environment torchrun sets, joins a gloo group, and trains a DDP model on its own
DataLoader over a DistributedSampler (num_workers=1); every sample costs 4 ms of
storage latency, batch 8 (32 ms per batch) against a 5 ms step; 20 steps per rank.

Truth: data-bound on read in each rank (the launcher only waits for them).
"""

import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class Remote(Dataset):
    def __len__(self):
        return 320

    def __getitem__(self, i):
        time.sleep(0.004)  # object-store latency
        return torch.full((6,), float(i % 4)), torch.tensor([float(i % 2)])


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    ds = Remote()
    loader = DataLoader(ds, batch_size=8, num_workers=1,
                        sampler=DistributedSampler(ds, num_replicas=world, rank=rank))
    model = DDP(torch.nn.Linear(6, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    steps = 0
    for x, y in loader:
        t0 = time.perf_counter()
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(max(0.0, 0.005 - (time.perf_counter() - t0)))
        steps += 1
    dist.barrier()
    if rank == 0:
        print(f"rank {rank}/{world} steps {steps}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
