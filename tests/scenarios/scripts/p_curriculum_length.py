"""A length curriculum that changes the dataset between epochs: ``train_set.max_len`` grows
from 16 to 48 tokens (``set_stage(epoch)``), and the workers (2, not persistent) see the
new length when the next epoch's iterator starts them. Each sample is read from slow
storage in chunks (4 ms a 16-token chunk, a sleep: 4, 8 then 12 ms a sample), batch 8
(32 to 96 ms a batch for one worker, 16 to 48 ms with two) against a 3 ms step; 3 epochs
of 24 batches.

Truth: data-bound on read in every stage (the reads, 0.4 to 1.2 s an epoch, outweigh
the workers' start at each epoch). The run is 72 steps whatever diagnose does.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class Sequences(Dataset):
    def __init__(self) -> None:
        self.max_len = 16

    def set_stage(self, stage: int) -> None:
        self.max_len = 16 * (stage + 1)

    def __len__(self) -> int:
        return 192

    def __getitem__(self, i):
        for _ in range(self.max_len // 16):
            time.sleep(0.004)
        x = torch.zeros(48)
        x[: self.max_len] = (i % 7) / 7
        return x, torch.tensor(float(i % 2))


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    train_set = Sequences()
    loader = DataLoader(train_set, batch_size=8, shuffle=True, num_workers=2)
    net = torch.nn.Linear(48, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for epoch in range(3):
        train_set.set_stage(epoch)
        n = 0
        for x, y in loader:
            t0 = time.perf_counter()
            loss = torch.nn.functional.binary_cross_entropy_with_logits(net(x).squeeze(1), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.003 - (time.perf_counter() - t0)))
            n += 1
        print(f"epoch {epoch}: max_len {train_set.max_len}, {n} batches")
