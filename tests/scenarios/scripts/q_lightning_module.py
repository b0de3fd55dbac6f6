"""A LightningModule-style model (``training_step``, ``validation_step``,
``configure_optimizers``, ``on_train_epoch_end``) driven by a small hand-written
``Trainer.fit(model, train_dataloaders, val_dataloaders)`` that runs a sanity check of 2
validation batches before training, then per epoch the training batches and a full
validation pass under ``torch.no_grad()``, with a StepLR stepped per epoch. The training
loader has 2 workers and ``persistent_workers=True`` (what Lightning's warning asks for),
the validation loader none. The step is a 40 ms forward and backward (a sleep pads the
real one: a GPU's time); samples come from memory (well under a millisecond a batch); 3
epochs of 15 batches.

Truth: compute-bound. The run is 45 training steps and 3 validation passes whatever
diagnose does.
"""

import time

import torch
from torch.utils.data import DataLoader, TensorDataset


class LitRegressor(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
        self.logged: dict[str, float] = {}

    def log(self, name: str, value: torch.Tensor) -> None:
        self.logged[name] = float(value)

    def training_step(self, batch, batch_idx):
        x, y = batch
        t0 = time.perf_counter()
        loss = torch.nn.functional.mse_loss(self.net(x).squeeze(-1), y)
        time.sleep(max(0.0, 0.020 - (time.perf_counter() - t0)))  # the forward on a GPU
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x).squeeze(-1), y))

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.05)
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)]

    def on_train_epoch_end(self) -> None:
        pass


class Trainer:
    def __init__(self, max_epochs: int, num_sanity_val_steps: int = 2) -> None:
        self.max_epochs, self.num_sanity_val_steps = max_epochs, num_sanity_val_steps
        self.global_step = 0
        self.val_passes = 0

    def _validate(self, model, loader, limit=None) -> int:
        model.eval()
        n = 0
        with torch.no_grad():
            for batch_idx, batch in enumerate(loader):
                if limit is not None and batch_idx >= limit:
                    break
                model.validation_step(batch, batch_idx)
                n += 1
        model.train()
        return n

    def fit(self, model, train_dataloaders, val_dataloaders) -> None:
        (opt,), (sched,) = model.configure_optimizers()
        self._validate(model, val_dataloaders, self.num_sanity_val_steps)
        for epoch in range(self.max_epochs):
            n = 0
            for batch_idx, batch in enumerate(train_dataloaders):
                t0 = time.perf_counter()
                loss = model.training_step(batch, batch_idx)
                opt.zero_grad()
                loss.backward()
                opt.step()
                time.sleep(max(0.0, 0.040 - (time.perf_counter() - t0)))  # backward on a GPU
                self.global_step += 1
                n += 1
            model.on_train_epoch_end()
            sched.step()
            v = self._validate(model, val_dataloaders)
            self.val_passes += 1
            print(f"epoch {epoch}: {n} steps, global_step {self.global_step}, val batches {v}")


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    x = torch.randn(240, 10)
    y = x.sum(dim=1)
    train = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True, num_workers=2,
                       persistent_workers=True)
    val = DataLoader(TensorDataset(x[:48], y[:48]), batch_size=16)
    trainer = Trainer(max_epochs=3)
    trainer.fit(LitRegressor(), train, val)
    print(f"val passes {trainer.val_passes}")
