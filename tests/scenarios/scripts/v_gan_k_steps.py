"""A GAN loop: a generator and a discriminator, each with its own optimizer, and two
discriminator steps per generator step (``k = 2``), every discriminator step drawing a
real batch from one loader with ``next(it)`` (``it = iter(loader)`` again when spent);
the generator step draws no batch. Real samples: 4 ms of storage latency each, batch 8
(32 ms a batch), 1 worker, against 3 ms steps; 20 generator steps over a 15-batch loader.

Truth: data-bound on read.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class Real(Dataset):
    def __len__(self):
        return 120

    def __getitem__(self, i):
        time.sleep(0.004)
        return torch.full((6,), float(i % 5) / 5)


def padded(t0, seconds):
    time.sleep(max(0.0, seconds - (time.perf_counter() - t0)))


if __name__ == "__main__":
    torch.set_num_threads(1)
    loader = DataLoader(Real(), batch_size=8, shuffle=True, num_workers=1)
    gen = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 6))
    disc = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt_g = torch.optim.Adam(gen.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(disc.parameters(), lr=2e-4, betas=(0.5, 0.999))
    bce = torch.nn.BCEWithLogitsLoss()
    it, passes, d_steps = iter(loader), 1, 0
    for _g_step in range(20):
        for _ in range(2):
            try:
                real = next(it)
            except StopIteration:
                it, passes = iter(loader), passes + 1
                real = next(it)
            t0 = time.perf_counter()
            fake = gen(torch.randn(real.shape[0], 4)).detach()
            loss_d = bce(disc(real), torch.ones(real.shape[0], 1)) + bce(
                disc(fake), torch.zeros(real.shape[0], 1))
            opt_d.zero_grad()
            loss_d.backward()
            opt_d.step()
            padded(t0, 0.003)
            d_steps += 1
        t0 = time.perf_counter()
        loss_g = bce(disc(gen(torch.randn(8, 4))), torch.ones(8, 1))
        opt_g.zero_grad()
        loss_g.backward()
        opt_g.step()
        padded(t0, 0.003)
    print(f"generator steps 20 discriminator steps {d_steps} passes {passes}")
