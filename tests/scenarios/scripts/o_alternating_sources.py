"""Two training sources that take turns by epoch, as hard-example mining loops do: even
epochs train on the full dataset read from slow storage (5 ms a sample, a sleep;
2 workers, batch 8: about 20 ms a batch), odd epochs on a small in-memory set of hard
examples (``num_workers=0``, 48 batches, well under a millisecond a batch). The step is
4 ms; 4 epochs: 40 slow batches, 48 fast, 40 slow, 48 fast. The fast loader has more
steps, but most of the run's time is spent waiting for the slow one (its workers start
again each of its epochs, about 0.2 s on a busy host, against 0.8 s of reads).

Truth: data-bound on read (the two loaders are one training run: the run waits for data
most of its time, in the slow loader's epochs). The run is 176 steps whatever diagnose
does.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset


class Remote(Dataset):
    def __len__(self):
        return 320

    def __getitem__(self, i):
        time.sleep(0.005)  # a sample from the network filesystem
        return torch.full((10,), float(i % 4)), torch.tensor(i % 2)


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    full = DataLoader(Remote(), batch_size=8, shuffle=True, num_workers=2)
    hard = DataLoader(TensorDataset(torch.randn(384, 10), torch.randint(0, 2, (384,))),
                      batch_size=8, shuffle=True)
    net = torch.nn.Linear(10, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    total = 0
    for epoch in range(4):
        source = full if epoch % 2 == 0 else hard
        n = 0
        for x, y in source:
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.004 - (time.perf_counter() - t0)))
            n += 1
        total += n
        print(f"epoch {epoch}: {'full' if epoch % 2 == 0 else 'hard'} {n} batches")
    print("steps", total)
