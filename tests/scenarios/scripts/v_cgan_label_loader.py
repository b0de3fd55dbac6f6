"""A conditional GAN with two loaders: two discriminator steps per generator step, each
drawing real images from the image loader (4 ms of storage latency a sample, batch 8,
32 ms a batch, 1 worker), and each generator step drawing the class labels to generate
from a second, in-memory loader (batch 8, in the training process); 3 ms steps; 20
generator steps. The label loader is training data taken in turn with the images.

Truth: data-bound on read (the image loader); the label loader is training data in
lockstep, not evaluation.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset


class Real(Dataset):
    def __len__(self):
        return 120

    def __getitem__(self, i):
        time.sleep(0.004)
        return torch.full((6,), float(i % 5) / 5), i % 4


def padded(t0, seconds):
    time.sleep(max(0.0, seconds - (time.perf_counter() - t0)))


def forever(loader):
    while True:
        yield from loader


if __name__ == "__main__":
    torch.set_num_threads(1)
    images = DataLoader(Real(), batch_size=8, shuffle=True, num_workers=1)
    labels = DataLoader(TensorDataset(torch.arange(64) % 4), batch_size=8, shuffle=True)
    gen = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 6))
    disc = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt_g = torch.optim.Adam(gen.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(disc.parameters(), lr=2e-4, betas=(0.5, 0.999))
    bce = torch.nn.BCEWithLogitsLoss()
    onehot = torch.eye(4)
    real_it, label_it, d_steps = forever(images), forever(labels), 0
    for _g_step in range(20):
        for _ in range(2):
            x, c = next(real_it)
            t0 = time.perf_counter()
            cond = onehot[c]
            fake = gen(torch.cat([torch.randn(8, 4), cond], 1)).detach()
            loss_d = bce(disc(torch.cat([x, cond], 1)), torch.ones(8, 1)) + bce(
                disc(torch.cat([fake, cond], 1)), torch.zeros(8, 1))
            opt_d.zero_grad()
            loss_d.backward()
            opt_d.step()
            padded(t0, 0.003)
            d_steps += 1
        (c,) = next(label_it)
        t0 = time.perf_counter()
        cond = onehot[c]
        loss_g = bce(disc(torch.cat([gen(torch.cat([torch.randn(8, 4), cond], 1)), cond], 1)),
                     torch.ones(8, 1))
        opt_g.zero_grad()
        loss_g.backward()
        opt_g.step()
        padded(t0, 0.003)
    print(f"generator steps 20 discriminator steps {d_steps}")
