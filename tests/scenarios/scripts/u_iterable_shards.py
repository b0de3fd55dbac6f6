"""A streaming IterableDataset sharded over 2 workers with get_worker_info() (the
PyTorch docs' recipe); every record costs 8 ms of storage latency; 5 ms train step.

Truth: data-bound on read. Two workers deliver a batch of 8 records every ~32 ms
against a 5 ms step: the loop waits most of the time (over a third even when a loaded
host stretches the step fourfold).
"""

import math
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, get_worker_info


class RecordStream(IterableDataset):
    def __init__(self, start: int, end: int) -> None:
        super().__init__()
        self.start, self.end = start, end

    def __iter__(self):
        info = get_worker_info()
        if info is None:
            lo, hi = self.start, self.end
        else:
            per = math.ceil((self.end - self.start) / float(info.num_workers))
            lo = self.start + info.id * per
            hi = min(lo + per, self.end)
        for i in range(lo, hi):
            time.sleep(0.008)  # one record from slow storage
            yield torch.randn(16), torch.tensor(float(i % 3))


def main() -> None:
    # one intra-op thread: on a busy two-core host torch's OpenMP threads otherwise spin
    # against the workers and this tiny step takes tens of milliseconds instead of one
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    loader = DataLoader(RecordStream(0, 160), batch_size=8, num_workers=2)
    for epoch in range(2):
        seen = 0
        for x, y in loader:
            t0 = time.perf_counter()
            loss = nn.functional.mse_loss(model(x).squeeze(1), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.005 - (time.perf_counter() - t0)))  # the device step
            seen += 1
        print(f"epoch {epoch}: {seen} batches")


if __name__ == "__main__":
    main()
