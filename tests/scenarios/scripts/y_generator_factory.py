"""The loader is built inside a generator function: ``def batches(split, epoch):`` makes
a DataLoader and yields ``x.float() / 255, y`` from it, so nothing exists until the first
``next`` and each epoch calls ``batches("train", epoch)`` anew. 1 worker, every sample
4 ms of CPU (decoding a uint8 record), batch 8 (32 ms per batch) against a 5 ms step;
3 epochs of 10 batches.
``torch.set_num_threads(1)`` in the training process (a small model).

Truth: data-bound on decode.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class Frames(Dataset):
    def __len__(self):
        return 80

    def __getitem__(self, i):
        end = time.thread_time() + 0.004
        while time.thread_time() < end:
            pass
        return torch.full((3, 8, 8), i % 256, dtype=torch.uint8), i % 4


def batches(split, epoch):
    g = torch.Generator().manual_seed(epoch)
    loader = DataLoader(Frames(), batch_size=8, shuffle=split == "train", generator=g, num_workers=1)
    for x, y in loader:
        yield x.float() / 255, y


if __name__ == "__main__":
    torch.set_num_threads(1)  # a small model: the intra-op pool only spins on a busy host
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(192, 4))
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    for epoch in range(3):
        n = 0
        for x, y in batches("train", epoch):
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.005 - (time.perf_counter() - t0)))
            n += 1
        print(f"epoch {epoch}: {n} batches")
