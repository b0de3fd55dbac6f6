"""The NVIDIA apex ImageNet example's ``data_prefetcher``: a class that holds the
DataLoader iterator, loads the next batch in ``preload()`` (on a side CUDA stream when
there is a GPU; here plain) and hands it out from ``next()``; the loop is
``while input is not None``. DataLoader(num_workers=2, persistent_workers=True: the
workers start once, not at each epoch's ``iter``), samples cost 0.2 ms of CPU (batch 8:
under 2 ms, 1 ms with two workers) against a 40 ms step; 3 epochs of 20.

Truth: compute-bound, almost no waiting on data.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class Cheap(Dataset):
    def __len__(self):
        return 160

    def __getitem__(self, i):
        end = time.thread_time() + 0.0002
        x = torch.zeros(8)
        while time.thread_time() < end:
            x = x + 1
        return x, i % 2


class data_prefetcher:
    def __init__(self, loader):
        self.loader = iter(loader)
        self.stream = torch.cuda.Stream() if torch.cuda.is_available() else None
        self.preload()

    def preload(self):
        try:
            self.next_input, self.next_target = next(self.loader)
        except StopIteration:
            self.next_input = self.next_target = None

    def next(self):
        if self.stream is not None:
            torch.cuda.current_stream().wait_stream(self.stream)
        inp, target = self.next_input, self.next_target
        self.preload()
        return inp, target


if __name__ == "__main__":
    loader = DataLoader(Cheap(), batch_size=8, num_workers=2, persistent_workers=True)
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(3):
        prefetcher = data_prefetcher(loader)
        inp, target = prefetcher.next()
        i = 0
        while inp is not None:
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(model(inp), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.040 - (time.perf_counter() - t0)))
            i += 1
            inp, target = prefetcher.next()
        print(f"epoch {epoch}: {i} iterations")
