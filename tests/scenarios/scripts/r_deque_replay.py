"""An offline replay buffer: a ``collections.deque(maxlen=...)`` filled by the loop
from a DataLoader of logged transitions, one batch per iteration, and updates sampled
from the deque with ``random.sample`` once it holds 64 transitions (the first 3 batches
only fill it; afterwards one update per batch, on a mix of old and new data). The
loader reads each transition from slow storage (6 ms, a sleep) in 1 worker, batch 16
(about 96 ms a batch) against a 5 ms update; 2 epochs of 10 batches.

Truth: data-bound on read (the loop waits for the loader to refill the buffer). The run
is 20 batches and 17 updates whatever diagnose does.
"""

import collections
import random
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Logged(Dataset):
    def __len__(self) -> int:
        return 160

    def __getitem__(self, i):
        time.sleep(0.006)
        return torch.full((4,), float(i % 11) / 11), torch.tensor(float(i % 3))


if __name__ == "__main__":
    random.seed(0)
    torch.set_num_threads(1)
    buffer = collections.deque(maxlen=128)
    q = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.Adam(q.parameters(), lr=1e-3)
    loader = DataLoader(Logged(), batch_size=16, shuffle=True, num_workers=1)
    batches = updates = 0
    for _epoch in range(2):
        for s, r in loader:
            buffer.extend(zip(s, r, strict=True))
            batches += 1
            if len(buffer) < 64:
                continue
            t0 = time.perf_counter()
            sample = random.sample(buffer, 32)
            xs = torch.stack([t[0] for t in sample])
            rs = torch.stack([t[1] for t in sample])
            loss = (q(xs).squeeze(-1) - rs).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.005 - (time.perf_counter() - t0)))
            updates += 1
    print(f"batches {batches} updates {updates} buffer {len(buffer)}")
