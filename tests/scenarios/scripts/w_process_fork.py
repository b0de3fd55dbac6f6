"""Training in a ``multiprocessing.Process`` started with ``fork`` (the default start
method on Linux before Python 3.14): the parent builds the dataset, forks one trainer and
waits for it (a hyper-parameter sweep runs several this way); the trainer's DataLoader has
1 worker, each sample 5 ms of storage latency, batch 8 (40 ms per batch) against a 5 ms
step.

Truth: data-bound on read, in the forked trainer.
"""

import multiprocessing as mp
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self):
        return 160

    def __getitem__(self, i):
        time.sleep(0.005)
        return torch.full((3,), float(i % 4))


def train(ds, lr, out):
    torch.set_num_threads(1)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    n = 0
    for x in DataLoader(ds, batch_size=8, num_workers=1):
        t0 = time.perf_counter()
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        time.sleep(max(0.0, 0.005 - (time.perf_counter() - t0)))
        n += 1
    out.put(n)


if __name__ == "__main__":
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=train, args=(Slow(), 1e-3, q))
    p.start()
    steps = q.get()
    p.join()
    print("trainer steps", steps, "exit", p.exitcode)
