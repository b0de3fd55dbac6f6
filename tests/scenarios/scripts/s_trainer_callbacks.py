"""A home-made Trainer with callbacks, the way Lightning and Keras users end up writing
their own: ``Trainer(callbacks=[ProgressLog(every=10), StopAfter(steps=30)])``, a
``fit()`` that calls ``self._run_epoch()``, which iterates ``self.train_loader`` with
``enumerate`` and fires ``on_train_batch_start`` / ``on_train_batch_end`` on every
callback; ``StopAfter`` ends training by raising ``StopTraining`` from a hook, caught
in ``fit()`` (the loader iterator is abandoned mid-epoch). 2 persistent workers, every
sample 6 ms of storage latency, batch 8 (48 ms a batch, 24 ms between the workers)
against a 4 ms step; the loader has 20 batches, so epoch 0 is whole and epoch 1 stops
after 10.

Truth: data-bound on read (stall about 0.8). The run is 30 steps whatever diagnose does.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class Store(Dataset):
    def __len__(self) -> int:
        return 160

    def __getitem__(self, i):
        time.sleep(0.006)
        return torch.full((5,), float(i % 4)), torch.tensor(i % 2)


class StopTraining(Exception):
    pass


class Callback:
    def on_train_batch_start(self, trainer, batch_idx: int) -> None: ...

    def on_train_batch_end(self, trainer, loss: float) -> None: ...


class ProgressLog(Callback):
    def __init__(self, every: int) -> None:
        self.every, self.lines = every, []

    def on_train_batch_end(self, trainer, loss: float) -> None:
        if trainer.global_step % self.every == 0:
            self.lines.append(f"step {trainer.global_step} loss {loss:.3f}")


class StopAfter(Callback):
    def __init__(self, steps: int) -> None:
        self.steps = steps

    def on_train_batch_end(self, trainer, loss: float) -> None:
        if trainer.global_step >= self.steps:
            raise StopTraining


class Trainer:
    def __init__(self, callbacks: list, max_epochs: int) -> None:
        self.callbacks, self.max_epochs = callbacks, max_epochs
        self.global_step, self.epoch = 0, 0

    def _fire(self, hook: str, *args) -> None:
        for cb in self.callbacks:
            getattr(cb, hook)(self, *args)

    def _training_step(self, batch) -> float:
        t0 = time.perf_counter()
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.model(x), y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        time.sleep(max(0.0, 0.004 - (time.perf_counter() - t0)))
        return loss.item()

    def _run_epoch(self) -> None:
        for batch_idx, batch in enumerate(self.train_loader):
            self._fire("on_train_batch_start", batch_idx)
            loss = self._training_step(batch)
            self.global_step += 1
            self._fire("on_train_batch_end", loss)

    def fit(self, model, train_loader) -> None:
        self.model, self.train_loader = model, train_loader
        self.opt = torch.optim.SGD(model.parameters(), lr=0.1)
        try:
            for epoch in range(self.max_epochs):
                self.epoch = epoch
                self._run_epoch()
        except StopTraining:
            pass


if __name__ == "__main__":
    torch.set_num_threads(1)
    log = ProgressLog(every=10)
    trainer = Trainer([log, StopAfter(steps=30)], max_epochs=5)
    loader = DataLoader(Store(), batch_size=8, shuffle=True, num_workers=2,
                        persistent_workers=True)
    trainer.fit(torch.nn.Linear(5, 2), loader)
    print(f"stopped at step {trainer.global_step} in epoch {trainer.epoch}, "
          f"{len(log.lines)} log lines")
