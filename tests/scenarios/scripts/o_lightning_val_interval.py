"""A LightningModule-style model (``training_step``, ``validation_step``,
``configure_optimizers``, ``on_train_batch_start``) driven by a hand-written ``fit`` loop
that copies two Lightning settings: ``val_check_interval=8`` (validation runs in the middle
of the epoch, every 8 training batches, not only at its end) and
``limit_train_batches=16`` (the epoch stops after 16 of the loader's 24 batches:
``on_train_batch_start`` returns -1, as Lightning reads it). In-memory data with
``num_workers=0``; a training step of 40 ms (a sleep pads the real one), validation of 4
in-memory batches under no_grad (2 ms each); 3 epochs.

Truth: compute-bound: the data costs a fraction of a millisecond a batch. The run is 48
training steps and 6 validations whatever diagnose does.
"""

import time

import torch
from torch.utils.data import DataLoader, TensorDataset


class LitClassifier(torch.nn.Module):
    def __init__(self, limit_train_batches):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(),
                                       torch.nn.Linear(32, 4))
        self.limit_train_batches = limit_train_batches

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        time.sleep(0.002)
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def on_train_batch_start(self, batch, batch_idx):
        return -1 if batch_idx >= self.limit_train_batches else None

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=1e-3)
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, step_size=16, gamma=0.5)]


class Trainer:
    def __init__(self, max_epochs, val_check_interval):
        self.max_epochs, self.val_check_interval = max_epochs, val_check_interval
        self.global_step, self.val_runs = 0, 0

    def _validate(self, module, val_loader):
        module.eval()
        with torch.no_grad():
            losses = [module.validation_step(b, i) for i, b in enumerate(val_loader)]
        module.train()
        self.val_runs += 1
        return sum(float(v) for v in losses) / len(losses)

    def fit(self, module, train_loader, val_loader):
        [opt], [sched] = module.configure_optimizers()
        for epoch in range(self.max_epochs):
            steps = 0
            for batch_idx, batch in enumerate(train_loader):
                if module.on_train_batch_start(batch, batch_idx) == -1:
                    break
                t0 = time.perf_counter()
                loss = module.training_step(batch, batch_idx)
                opt.zero_grad()
                loss.backward()
                opt.step()
                time.sleep(max(0.0, 0.040 - (time.perf_counter() - t0)))
                self.global_step += 1
                steps += 1
                if (batch_idx + 1) % self.val_check_interval == 0:
                    self._validate(module, val_loader)
            sched.step()
            print(f"epoch {epoch}: {steps} steps, global_step {self.global_step}")
        print(f"validations {self.val_runs}")


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    train = TensorDataset(torch.randn(384, 20), torch.randint(0, 4, (384,)))
    val = TensorDataset(torch.randn(64, 20), torch.randint(0, 4, (64,)))
    trainer = Trainer(max_epochs=3, val_check_interval=8)
    trainer.fit(LitClassifier(limit_train_batches=16),
                DataLoader(train, batch_size=16, shuffle=True),
                DataLoader(val, batch_size=16))
