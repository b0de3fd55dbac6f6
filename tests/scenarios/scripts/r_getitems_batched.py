"""A map-style dataset with ``__getitems__`` (PyTorch >= 2.1 calls it with a whole
batch of indices instead of ``__getitem__`` per index): one request to a key-value store
per batch, 30 ms of round trip plus 1 ms a key (sleeps standing in for the store), and
``collate_fn`` left at its default. 1 worker, batch 8 (about 38 ms a batch) against a
4 ms step; 2 epochs of 12 batches.

Truth: data-bound on read (the worker waits on the store). The run is 24 steps whatever
diagnose does.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class KVStore(Dataset):
    def __len__(self) -> int:
        return 96

    def __getitem__(self, i):
        return self.__getitems__([i])[0]

    def __getitems__(self, indices):
        time.sleep(0.030 + 0.001 * len(indices))  # one multi-get round trip
        return [(torch.full((5,), float(i % 7)), torch.tensor(i % 2)) for i in indices]


if __name__ == "__main__":
    torch.set_num_threads(1)
    net = torch.nn.Linear(5, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    loader = DataLoader(KVStore(), batch_size=8, shuffle=True, num_workers=1)
    for epoch in range(2):
        n = 0
        for x, y in loader:
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.004 - (time.perf_counter() - t0)))
            n += 1
        print(f"epoch {epoch}: {n} batches, shape {tuple(x.shape)}")
