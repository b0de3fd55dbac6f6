"""A dataset that returns whole batches: DataLoader(batch_size=None) over a BatchSampler,
so __getitem__ gets a list of 16 indices and does 24 ms of CPU work for them (feature
extraction); in the training process (num_workers=0); 6 ms train step.

Truth: data-bound on decode (CPU), about 80% of the time spent waiting.
"""

import time

import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, SequentialSampler


def featurize(n: int, cpu_s: float) -> np.ndarray:
    """CPU work: spends ``cpu_s`` of this thread's CPU time on real arithmetic."""
    acc = np.zeros(n, dtype=np.float64)
    end = time.thread_time() + cpu_s
    k = 0
    while time.thread_time() < end:
        acc += (k % 5) * 0.001
        k += 1
    return acc.astype(np.float32)


class Batches(Dataset):
    def __len__(self) -> int:
        return 640

    def __getitem__(self, indices):
        feats = featurize(len(indices) * 12, 0.024).reshape(len(indices), 12)
        return torch.from_numpy(feats), torch.tensor(indices, dtype=torch.float32)


model = torch.nn.Linear(12, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
sampler = BatchSampler(SequentialSampler(range(640)), batch_size=16, drop_last=False)
loader = DataLoader(Batches(), sampler=sampler, batch_size=None)
n = 0
for x, y in loader:
    t0 = time.perf_counter()
    loss = ((model(x).squeeze(1) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(max(0.0, 0.006 - (time.perf_counter() - t0)))
    n += 1
print("batches", n)
