"""Semi-supervised training: a labelled and an unlabelled DataLoader zipped,
``for (x, y), (u,) in zip(labelled, unlabelled)``; the labelled one is cheap (in memory),
the unlabelled one reads each sample from slow storage (10 ms x 8 per batch, 1 worker);
5 ms step.

Truth: data-bound on read (the unlabelled loader): the loop waits for it about 90%
of the time, although the labelled loader is always ready.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset


class Unlabelled(Dataset):
    def __len__(self) -> int:
        return 240

    def __getitem__(self, i):
        time.sleep(0.010)
        return (torch.randn(6),)


if __name__ == "__main__":
    labelled = DataLoader(TensorDataset(torch.randn(240, 6), torch.randn(240)), batch_size=8,
                          shuffle=True)
    unlabelled = DataLoader(Unlabelled(), batch_size=8, num_workers=1)
    model = torch.nn.Linear(6, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    steps = 0
    for (x, y), (u,) in zip(labelled, unlabelled):  # noqa: B905 (as users write it)
        t0 = time.perf_counter()
        sup = ((model(x).squeeze(1) - y) ** 2).mean()
        consistency = ((model(u) - model(u + 0.01 * torch.randn_like(u))) ** 2).mean()
        loss = sup + consistency
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(max(0.0, 0.005 - (time.perf_counter() - t0)))
        steps += 1
    print("steps", steps)
