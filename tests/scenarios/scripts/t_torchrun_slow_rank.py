"""One slow rank under torchrun: ``python -m torch.distributed.run --standalone
--nproc-per-node 2``, gloo, a DDP model, a ``DistributedSampler(shuffle=False)`` that
deals sample ``i`` to rank ``i % 2``. Odd samples live on slow storage (10 ms each), even
ones in memory, so rank 1 waits 80 ms for every batch of 8 while rank 0's loader is
instant and rank 0 waits for rank 1 inside DDP's gradient all-reduce (its step looks
long). num_workers=0, a 5 ms step, 20 steps per rank.

Truth: the job is data-bound on read (rank 1's loader); rank 0's long steps are the
all-reduce waiting for it, not its own compute.
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
        return 320

    def __getitem__(self, i):
        if i % 2:
            time.sleep(0.010)  # the slow shard
        return torch.full((6,), float(i % 4)), torch.tensor([float(i % 3)])


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    ds = HalfRemote()
    loader = DataLoader(ds, batch_size=8, num_workers=0,
                        sampler=DistributedSampler(ds, num_replicas=world, rank=rank,
                                                   shuffle=False))
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
        print(f"rank 0 steps {steps}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
