"""The step runs on another thread than the loader: the main thread iterates the
DataLoader and hands each batch to a one-thread ``ThreadPoolExecutor`` (a "device
thread", as serving code and some RL learners do), waiting for the result before the
next ``next()``: ``pool.submit(train_step, x, y).result()``; the forward, backward and
optimizer step all happen on the pool's thread. 1 worker, every sample 5 ms of storage
latency, batch 8 (40 ms a batch) against a 5 ms step; 2 epochs of 15 batches.

Truth: data-bound on read (stall about 0.8): the loop waits for the worker, the device
thread idles. The run is 30 steps whatever diagnose does.
"""

import time
from concurrent.futures import ThreadPoolExecutor

import torch
from torch.utils.data import DataLoader, Dataset


class Disk(Dataset):
    def __len__(self) -> int:
        return 120

    def __getitem__(self, i):
        time.sleep(0.005)
        return torch.full((6,), float(i % 3)), torch.tensor(i % 2)


net = torch.nn.Linear(6, 2)
opt = torch.optim.SGD(net.parameters(), lr=0.1)


def train_step(x, y) -> float:
    t0 = time.perf_counter()
    loss = torch.nn.functional.cross_entropy(net(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(max(0.0, 0.005 - (time.perf_counter() - t0)))
    return loss.item()


if __name__ == "__main__":
    torch.set_num_threads(1)
    loader = DataLoader(Disk(), batch_size=8, shuffle=True, num_workers=1)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="device") as device:
        for epoch in range(2):
            n = 0
            for x, y in loader:
                device.submit(train_step, x, y).result()
                n += 1
            print(f"epoch {epoch}: {n} steps")
