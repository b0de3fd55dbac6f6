"""A DataLoader over ``ConcatDataset([fast, slow])``, shuffled: the in-memory half costs
nothing, the other half is fetched from slow storage (16 ms per sample); batch 8 (about
64 ms of reads per batch), 2 workers (about 32 ms per batch between them) against a
5 ms step; 2 epochs of 10 batches.

Truth: data-bound on read.
"""

import time

import torch
from torch.utils.data import ConcatDataset, DataLoader, Dataset, TensorDataset


class Remote(Dataset):
    def __len__(self):
        return 80

    def __getitem__(self, i):
        time.sleep(0.016)
        return torch.zeros(6), torch.tensor(1.0)


if __name__ == "__main__":
    ds = ConcatDataset([TensorDataset(torch.randn(80, 6), torch.zeros(80)), Remote()])
    dl = DataLoader(ds, batch_size=16, shuffle=True, num_workers=2)
    model = torch.nn.Linear(6, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for epoch in range(2):
        n = 0
        for x, y in dl:
            t0 = time.perf_counter()
            loss = ((model(x).squeeze(1) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.005 - (time.perf_counter() - t0)))
            n += 1
        print(f"epoch {epoch}: {n} batches")
