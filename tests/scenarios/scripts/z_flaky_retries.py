"""A dataset over flaky storage that raises and catches its own errors: every third
read fails after 4 ms (``OSError``), is retried after a 4 ms back-off and then takes
4 ms; a missing record (every 10th) raises ``KeyError``, caught, and a neighbour is
served instead. About 6.7 ms a sample on average, batch 8 (about 54 ms a batch), 1
worker against a 5 ms step; 30 steps.

Truth: data-bound on read.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class Flaky(Dataset):
    def __init__(self):
        self.tries = 0

    def __len__(self):
        return 240

    def fetch(self, i):
        self.tries += 1
        time.sleep(0.004)
        if i % 10 == 9:
            raise KeyError(i)
        if self.tries % 3 == 0:
            raise OSError(f"read {i}: connection reset")
        return torch.full((6,), float(i % 4))

    def __getitem__(self, i):
        for _attempt in range(3):
            try:
                x = self.fetch(i)
                break
            except OSError:
                time.sleep(0.004)
            except KeyError:
                i -= 1
        else:
            x = torch.zeros(6)
        return x, x.sum()


if __name__ == "__main__":
    torch.set_num_threads(1)
    dl = DataLoader(Flaky(), batch_size=8, num_workers=1)
    model = torch.nn.Linear(6, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    steps = 0
    for x, y in dl:
        t0 = time.perf_counter()
        loss = ((model(x).squeeze(1) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(max(0.0, 0.005 - (time.perf_counter() - t0)))
        steps += 1
    print(f"steps {steps}")
