"""K-fold cross-validation: for each of 3 folds a fresh model, a training DataLoader over
the fold's ``Subset`` (64 samples, batch 8, 1 worker) and a validation DataLoader over
the held-out ``Subset`` (32 samples, batch 8, 1 worker, under ``torch.no_grad()``), both
built anew in the fold loop; 2 epochs per fold, validation after each. Every sample
costs 4 ms of storage latency (32 ms a batch) against a 4 ms training step.

Truth: the training loader (one data path, rebuilt for every fold) is data-bound on read;
the validation loader is its own line.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset, Subset


class Remote(Dataset):
    def __len__(self):
        return 96

    def __getitem__(self, i):
        time.sleep(0.004)
        x = torch.full((6,), float(i % 6) / 6)
        return x, x.sum(0, keepdim=True)


if __name__ == "__main__":
    torch.set_num_threads(1)
    ds = Remote()
    idx = list(range(len(ds)))
    for fold in range(3):
        held = idx[fold * 32:(fold + 1) * 32]
        train_idx = [i for i in idx if i not in set(held)]
        train_dl = DataLoader(Subset(ds, train_idx), batch_size=8, shuffle=True, num_workers=1)
        val_dl = DataLoader(Subset(ds, held), batch_size=8, num_workers=1)
        model = torch.nn.Linear(6, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        val_batches = 0
        for _epoch in range(2):
            model.train()
            for x, y in train_dl:
                t0 = time.perf_counter()
                loss = torch.nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                time.sleep(max(0.0, 0.004 - (time.perf_counter() - t0)))
            model.eval()
            with torch.no_grad():
                for x, y in val_dl:
                    torch.nn.functional.mse_loss(model(x), y)
                    val_batches += 1
        print(f"fold {fold}: train {len(train_idx)} val batches {val_batches}")
