"""``DataLoader(in_order=False)`` with 2 workers: batches are handed out as they are
ready, not in sampler order. Every 4th sample is slow (20 ms of storage latency), the
rest take 2 ms: batch 4 (26 ms per batch, 13 ms with two workers) against a 3 ms
step; 60 steps.

Truth: data-bound on read.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class Uneven(Dataset):
    def __len__(self):
        return 240

    def __getitem__(self, i):
        time.sleep(0.020 if i % 4 == 0 else 0.002)
        return torch.full((3,), float(i))


if __name__ == "__main__":
    loader = DataLoader(Uneven(), batch_size=4, num_workers=2, in_order=False)
    model = torch.nn.Linear(3, 1)
    seen = set()
    for x in loader:
        t0 = time.perf_counter()
        model(x / 240).sum().backward()
        time.sleep(max(0.0, 0.003 - (time.perf_counter() - t0)))
        seen.update(int(v) for v in x[:, 0])
    print(f"steps {len(seen) // 4} all samples {len(seen) == 240}")
