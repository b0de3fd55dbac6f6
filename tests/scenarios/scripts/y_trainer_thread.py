"""The whole training loop runs in a ``threading.Thread`` (a service keeps its main
thread for a control loop: it polls the trainer every 50 ms and prints progress at the
end). DataLoader(num_workers=2), every sample 6 ms of storage latency, batch 8 (48 ms
per batch, 24 ms with two workers) against a 5 ms step; 2 epochs of 15 batches.
``torch.set_num_threads(1)`` in the training process (a small model).

Truth: data-bound on read, measured on the trainer thread.
"""

import threading
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Blobs(Dataset):
    def __len__(self):
        return 120

    def __getitem__(self, i):
        time.sleep(0.006)
        return torch.randn(8), torch.randn(())


class Trainer(threading.Thread):
    def __init__(self):
        super().__init__(name="trainer")
        self.steps, self.per_epoch = 0, []

    def run(self):
        loader = DataLoader(Blobs(), batch_size=8, num_workers=2)
        net = torch.nn.Linear(8, 1)
        opt = torch.optim.SGD(net.parameters(), lr=0.01)
        for _ in range(2):
            n = 0
            for x, y in loader:
                t0 = time.perf_counter()
                loss = torch.nn.functional.mse_loss(net(x).squeeze(1), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                time.sleep(max(0.0, 0.005 - (time.perf_counter() - t0)))
                n += 1
                self.steps += 1
            self.per_epoch.append(n)


if __name__ == "__main__":
    torch.set_num_threads(1)  # a small model: the intra-op pool only spins on a busy host
    trainer = Trainer()
    trainer.start()
    polls = 0
    while trainer.is_alive():
        trainer.join(0.05)
        polls += 1
    print(f"trainer done: {trainer.steps} steps, epochs {trainer.per_epoch}, polled {polls > 0}")
