"""Lightning style without Lightning: a ``LitModel`` with ``training_step`` /
``validation_step`` / ``configure_optimizers``, driven by a hand-written ``Trainer``
class (``fit(model, train_loader, val_loader)``, ``max_epochs=2``, validation at each
epoch end, ``self.global_step``). Training samples come from slow storage (8 ms of
latency each, batch 8, 1 worker: 64 ms per batch) against a 5 ms step.

Truth: data-bound on read (the validation loader is small and in memory).
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset


class RemoteDataset(Dataset):
    def __len__(self):
        return 160

    def __getitem__(self, i):
        time.sleep(0.008)  # an object-store GET
        x = torch.randn(16)
        return x, (x.sum() > 0).long()


class LitModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))

    def training_step(self, batch, batch_idx):
        x, y = batch
        t0 = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        time.sleep(max(0.0, 0.005 - (time.perf_counter() - t0)))  # the accelerator's share
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        return (self.net(x).argmax(1) == y).float().mean()

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


class Trainer:
    def __init__(self, max_epochs):
        self.max_epochs = max_epochs
        self.global_step = 0

    def fit(self, model, train_dataloaders, val_dataloaders):
        opt = model.configure_optimizers()
        for epoch in range(self.max_epochs):
            model.train()
            for batch_idx, batch in enumerate(train_dataloaders):
                loss = model.training_step(batch, batch_idx)
                opt.zero_grad()
                loss.backward()
                opt.step()
                self.global_step += 1
            model.eval()
            with torch.no_grad():
                accs = [model.validation_step(b, i) for i, b in enumerate(val_dataloaders)]
            print(f"epoch {epoch}: global_step={self.global_step} val_batches={len(accs)}")


if __name__ == "__main__":
    torch.set_num_threads(1)  # a small CPU box: the workers need the other core
    train = DataLoader(RemoteDataset(), batch_size=8, shuffle=True, num_workers=1)
    val = DataLoader(TensorDataset(torch.randn(64, 16), torch.randint(0, 2, (64,))), batch_size=32)
    Trainer(max_epochs=2).fit(LitModel(), train, val)
