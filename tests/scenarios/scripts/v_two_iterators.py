"""Two live iterators of one DataLoader: a GAN whose discriminator draws real images from
``it_d = iter(loader)`` twice per generator step, and whose generator draws real images
too (a feature-matching loss) from its own ``it_g = iter(loader)``; each iterator has
its own worker (1 each), each restarted on ``StopIteration``. 4 ms of storage latency
a sample, batch 8 (32 ms a batch, each iterator's worker on its own) against 3 ms steps;
20 generator steps.

Truth: data-bound on read.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class Real(Dataset):
    def __len__(self):
        return 96

    def __getitem__(self, i):
        time.sleep(0.004)
        return torch.full((6,), float(i % 5) / 5)


def padded(t0, seconds):
    time.sleep(max(0.0, seconds - (time.perf_counter() - t0)))


if __name__ == "__main__":
    torch.set_num_threads(1)
    loader = DataLoader(Real(), batch_size=8, shuffle=True, num_workers=1)
    gen = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 6))
    feat = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU())
    head = torch.nn.Linear(16, 1)
    opt_g = torch.optim.Adam(gen.parameters(), lr=2e-4)
    opt_d = torch.optim.Adam([*feat.parameters(), *head.parameters()], lr=2e-4)
    bce = torch.nn.BCEWithLogitsLoss()
    iters = {"d": iter(loader), "g": iter(loader)}
    drawn = {"d": 0, "g": 0}

    def draw(who):
        try:
            batch = next(iters[who])
        except StopIteration:
            iters[who] = iter(loader)
            batch = next(iters[who])
        drawn[who] += 1
        return batch

    for _g_step in range(20):
        for _ in range(2):
            real = draw("d")
            t0 = time.perf_counter()
            fake = gen(torch.randn(real.shape[0], 4)).detach()
            loss_d = bce(head(feat(real)), torch.ones(real.shape[0], 1)) + bce(
                head(feat(fake)), torch.zeros(real.shape[0], 1))
            opt_d.zero_grad()
            loss_d.backward()
            opt_d.step()
            padded(t0, 0.003)
        real = draw("g")
        t0 = time.perf_counter()
        fake = gen(torch.randn(real.shape[0], 4))
        loss_g = ((feat(fake).mean(0) - feat(real).mean(0).detach()) ** 2).sum()
        opt_g.zero_grad()
        loss_g.backward()
        opt_g.step()
        padded(t0, 0.003)
    print(f"discriminator draws {drawn['d']} generator draws {drawn['g']}")
