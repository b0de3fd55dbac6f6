"""An existing DataLoader wrapped as the README shows: ``for x, y in feedline.wrap(loader)``
(copy-stream prefetch on a GPU; on this CPU host the batches pass through). 1 worker,
every sample 5 ms of storage latency, batch 8 (40 ms per batch) against a 5 ms step;
2 epochs of 15 batches.
``torch.set_num_threads(1)`` in the training process (a small model).

Truth: data-bound on read: wrapping adds transfer overlap, not more workers.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset

import feedline


class Bucket(Dataset):
    def __len__(self):
        return 120

    def __getitem__(self, i):
        time.sleep(0.005)
        return torch.randn(10), torch.tensor(i % 2)


if __name__ == "__main__":
    torch.set_num_threads(1)  # a small model: the intra-op pool only spins on a busy host
    device = "cuda" if torch.cuda.is_available() else "cpu"
    loader = feedline.wrap(DataLoader(Bucket(), batch_size=8, shuffle=True, num_workers=1),
                           device=device)
    net = torch.nn.Linear(10, 2).to(device)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    for epoch in range(2):
        n = 0
        for x, y in loader:
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.005 - (time.perf_counter() - t0)))
            n += 1
        print(f"epoch {epoch}: {n} batches")
