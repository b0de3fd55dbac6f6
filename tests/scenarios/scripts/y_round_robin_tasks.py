"""Multi-task training, round robin over three task loaders kept in a dict: step k
trains task ``k % 3`` on ``next(iters[task])``, re-making that task's iterator when it
ends. Two tasks are in memory (num_workers=0, instant); the third ("ocr") reads every
sample from slow storage (8 ms, batch 8: 64 ms per batch, 1 worker). A 4 ms step; 60
steps. All three are training data.
``torch.set_num_threads(1)`` in the training process (a small model).

Truth: data-bound on read: every third step waits about 55 ms for the ocr loader.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset


class Scans(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        time.sleep(0.008)
        return torch.randn(16), torch.tensor(i % 2)


if __name__ == "__main__":
    torch.set_num_threads(1)  # a small model: the intra-op pool only spins on a busy host
    loaders = {
        "tagging": DataLoader(TensorDataset(torch.randn(96, 16), torch.randint(0, 2, (96,))), batch_size=8),
        "parsing": DataLoader(TensorDataset(torch.randn(80, 16), torch.randint(0, 2, (80,))), batch_size=8),
        "ocr": DataLoader(Scans(), batch_size=8, num_workers=1),
    }
    heads = {t: torch.nn.Linear(16, 2) for t in loaders}
    opt = torch.optim.SGD([p for h in heads.values() for p in h.parameters()], lr=0.05)
    iters = {t: iter(dl) for t, dl in loaders.items()}
    seen = dict.fromkeys(loaders, 0)
    tasks = list(loaders)
    for k in range(60):
        task = tasks[k % 3]
        try:
            x, y = next(iters[task])
        except StopIteration:
            iters[task] = iter(loaders[task])
            x, y = next(iters[task])
        t0 = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(heads[task](x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(max(0.0, 0.004 - (time.perf_counter() - t0)))
        seen[task] += 1
    print("steps 60", " ".join(f"{t}={n}" for t, n in seen.items()))
