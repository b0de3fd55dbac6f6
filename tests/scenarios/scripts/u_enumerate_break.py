"""``for i, (x, y) in enumerate(loader)`` that breaks after 15 steps, for 3 epochs;
2 workers (not persistent), each sample 12 ms of storage latency, batch 8; 3 ms step.

Truth: data-bound on read: two workers deliver a batch every ~48 ms against a 3 ms
step (the workers' start-up at each epoch is a small part of that). The run is 45 steps whatever diagnose does.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self) -> int:
        return 1000

    def __getitem__(self, i):
        time.sleep(0.012)
        return torch.ones(4) * i, torch.tensor(i % 2)


if __name__ == "__main__":
    net = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    loader = DataLoader(Slow(), batch_size=8, shuffle=True, num_workers=2)
    for epoch in range(3):
        for i, (x, y) in enumerate(loader):
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.003 - (time.perf_counter() - t0)))
            if i == 14:
                break
        print(f"epoch {epoch}: stopped at step {i}")
