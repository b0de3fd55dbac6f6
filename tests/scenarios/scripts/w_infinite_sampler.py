"""An infinite sampler (a ``Sampler`` whose ``__iter__`` never ends, as in detectron2's
``TrainingSampler``) and a training loop bounded by ``max_iter``:
``for it, batch in zip(range(max_iter), loader, strict=False)``; 2 workers, cheap samples (1 ms of
reads per batch); 30 ms step; 60 iterations.

Truth: compute-bound.
"""

import itertools
import time

import torch
from torch.utils.data import DataLoader, Dataset, Sampler


class TrainingSampler(Sampler):
    def __init__(self, size, seed=0):
        self.size, self.seed = size, seed

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed)
        while True:
            yield from torch.randperm(self.size, generator=g).tolist()


class Points(Dataset):
    def __len__(self):
        return 50

    def __getitem__(self, i):
        if i % 8 == 0:
            time.sleep(0.001)
        return torch.tensor([float(i), 1.0])


if __name__ == "__main__":
    loader = DataLoader(Points(), batch_size=8, sampler=TrainingSampler(50), num_workers=2)
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    max_iter = 60
    done = 0
    for it, x in zip(range(max_iter), loader, strict=False):
        t0 = time.perf_counter()
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(max(0.0, 0.030 - (time.perf_counter() - t0)))
        done = it + 1
    print("iterations", done, "islice ok", len(list(itertools.islice(range(3), 2))))
