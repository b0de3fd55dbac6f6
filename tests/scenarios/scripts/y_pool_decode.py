"""A batch-level dataset that decodes in a thread pool: ``DataLoader(batch_size=None,
sampler=BatchSampler(...))``, and ``__getitem__`` gets 8 indices and maps a decode
function over them with the dataset's own ``ThreadPoolExecutor(4)`` (a common way to
"parallelise" decoding inside one worker). Each decode is 4 ms of CPU in Python, so the
pool threads take turns under the GIL: 32 ms of CPU per batch, in 1 worker process,
against a 4 ms step; 30 steps.

Truth: data-bound on decode (CPU on the pool's threads, not blocked time, although the
worker's own thread only waits for the pool).
"""

import time
from concurrent.futures import ThreadPoolExecutor

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, SequentialSampler


def decode(i):
    end = time.thread_time() + 0.004
    acc = 0
    while time.thread_time() < end:
        acc += 1
    return torch.full((16,), float(i % 9))


class Batches(Dataset):
    def __init__(self, n):
        self.n, self.pool = n, None

    def __len__(self):
        return self.n

    def __getitem__(self, indices):
        if self.pool is None:  # made in the worker process that uses it
            self.pool = ThreadPoolExecutor(4)
        xs = list(self.pool.map(decode, indices))
        return torch.stack(xs), torch.tensor([i % 2 for i in indices])


if __name__ == "__main__":
    torch.set_num_threads(1)
    ds = Batches(240)
    loader = DataLoader(ds, batch_size=None, num_workers=1,
                        sampler=BatchSampler(SequentialSampler(range(len(ds))), 8, drop_last=False))
    net = torch.nn.Linear(16, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    steps = 0
    for x, y in loader:
        t0 = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(max(0.0, 0.004 - (time.perf_counter() - t0)))
        steps += 1
    print("steps", steps)
