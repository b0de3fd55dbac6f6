"""Two ranks started with ``torch.multiprocessing.spawn`` (gloo, 127.0.0.1), each with
its own DataLoader over a DistributedSampler (num_workers=0) and a DDP model; every
sample costs 4 ms of storage latency, batch 8 (32 ms per batch) against a 5 ms step;
20 steps per rank.

Truth: data-bound on read in each rank (the parent process only waits for them).
"""

import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class Slow(Dataset):
    def __len__(self):
        return 320

    def __getitem__(self, i):
        time.sleep(0.004)
        return torch.full((4,), float(i % 3))


def worker(rank, world, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    ds = Slow()
    dl = DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds, world, rank))
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    steps = 0
    for x in dl:
        t0 = time.perf_counter()
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(max(0.0, 0.005 - (time.perf_counter() - t0)))
        steps += 1
    if rank == 0:
        print("rank 0 steps", steps)
    dist.destroy_process_group()


if __name__ == "__main__":
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(2, port), nprocs=2)
    print("done")
