"""A fixed number of steps per "epoch" over a larger loader, the way scripts with a
``--steps-per-epoch`` flag write it: ``for x, y in tqdm(itertools.islice(loader, 12),
total=12, disable=True)`` each epoch (the progress bar off, as under a job scheduler),
so every epoch starts a new iterator of a 30-batch loader and leaves it after 12
batches (its 2 persistent workers are told to start the new epoch, the batches they had
in flight for the old one dropped). Each sample is 8 ms of storage latency (a sleep),
batch 8 (64 ms a batch, 32 ms with two workers) against a 4 ms step; 3 epochs.

Truth: data-bound on read. The run is 36 steps whatever diagnose does.
"""

import itertools
import time

import torch
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm


class Remote(Dataset):
    def __len__(self):
        return 240

    def __getitem__(self, i):
        time.sleep(0.008)  # a sample from object storage
        return torch.full((8,), float(i % 5)), torch.tensor(float(i % 2))


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    loader = DataLoader(Remote(), batch_size=8, shuffle=True, num_workers=2,
                        persistent_workers=True)
    net = torch.nn.Linear(8, 1)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    steps_per_epoch, steps = 12, 0
    for epoch in range(3):
        bar = tqdm(itertools.islice(loader, steps_per_epoch), total=steps_per_epoch,
                   desc=f"epoch {epoch}", disable=True)
        for x, y in bar:
            t0 = time.perf_counter()
            loss = torch.nn.functional.binary_cross_entropy_with_logits(net(x).squeeze(1), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            bar.set_postfix(loss=loss.item())
            time.sleep(max(0.0, 0.004 - (time.perf_counter() - t0)))
            steps += 1
        print(f"epoch {epoch}: {steps} steps so far")
