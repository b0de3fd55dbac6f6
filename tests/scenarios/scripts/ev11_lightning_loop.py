"""A Lightning-style loop object: a LightningModule-like model (training_step,
validation_step, configure_optimizers), a DataModule, and a hand-written FitLoop with
advance()/on_*_end hooks that runs validation at each epoch end.

Truth by construction: the training data are in memory (a few microseconds a batch),
the training step costs 30 ms (a sleep standing in for the accelerator's step):
compute-bound, stall near 0. The validation loader's collate pads text and costs 25 ms
a batch (its own loader, not training time).
"""
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class LitModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(32, 2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.layer(x), y)
        time.sleep(0.030)  # stands in for the forward/backward on the accelerator
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.layer(x), y)

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, 1)}


def slow_pad_collate(batch):
    time.sleep(0.025)  # padding/tokenising a validation batch in Python
    xs, ys = zip(*batch, strict=True)
    return torch.stack(xs), torch.stack(ys)


class DataModule:
    def setup(self):
        g = torch.Generator().manual_seed(1)
        self.train = TensorDataset(torch.randn(256, 32, generator=g), torch.randint(0, 2, (256,), generator=g))
        self.val = TensorDataset(torch.randn(64, 32, generator=g), torch.randint(0, 2, (64,), generator=g))

    def train_dataloader(self):
        return DataLoader(self.train, batch_size=16, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val, batch_size=16, collate_fn=slow_pad_collate)


class FitLoop:
    def __init__(self, max_epochs):
        self.max_epochs = max_epochs
        self.current_epoch = 0
        self.global_step = 0

    def run(self, model, dm):
        dm.setup()
        cfg = model.configure_optimizers()
        self.opt, self.sched = cfg["optimizer"], cfg["lr_scheduler"]
        while not self.done:
            self.on_advance_start()
            self.advance(model, dm)
            self.on_advance_end(model, dm)

    @property
    def done(self):
        return self.current_epoch >= self.max_epochs

    def on_advance_start(self):
        self.batches = 0

    def advance(self, model, dm):
        model.train()
        for batch_idx, batch in enumerate(dm.train_dataloader()):
            loss = model.training_step(batch, batch_idx)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            self.global_step += 1
            self.batches += 1

    def on_advance_end(self, model, dm):
        model.eval()
        with torch.no_grad():
            vals = [model.validation_step(b, i) for i, b in enumerate(dm.val_dataloader())]
        self.sched.step()
        print(f"epoch {self.current_epoch}: {self.batches} batches, val {len(vals)}", flush=True)
        self.current_epoch += 1


if __name__ == "__main__":
    torch.manual_seed(0)
    loop = FitLoop(max_epochs=3)
    loop.run(LitModel(), DataModule())
    print(f"global_step: {loop.global_step}", flush=True)
