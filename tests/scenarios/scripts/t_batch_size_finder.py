"""A batch-size finder before training (as Lightning's ``scale_batch_size``): for each of
batch sizes 8, 16 and 32 a DataLoader is built, three steps are tried and timed, then
the loop breaks; training then runs 2 epochs of 20 batches with batch 16 on a loader
built at another line. 2 workers, 5 ms of storage latency a sample (80 ms a batch of 16,
40 ms with two workers: 800 ms an epoch, against the 100-300 ms that starting the workers
again takes on a loaded two-core host) against a 4 ms step.

Truth: the training loader is data-bound on read; the short trial loaders are a small
part of the run.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class Remote(Dataset):
    def __len__(self):
        return 320

    def __getitem__(self, i):
        time.sleep(0.005)
        x = torch.full((6,), float(i % 5))
        return x, x.mean(0, keepdim=True)


def step(model, opt, x, y):
    t0 = time.perf_counter()
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(max(0.0, 0.004 - (time.perf_counter() - t0)))


if __name__ == "__main__":
    torch.set_num_threads(1)
    ds = Remote()
    model = torch.nn.Linear(6, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    tried = []
    for bs in (8, 16, 32):
        trial = DataLoader(ds, batch_size=bs, shuffle=True, num_workers=2)
        for i, (x, y) in enumerate(trial):
            step(model, opt, x, y)
            if i == 2:
                break
        tried.append(bs)
    loader = DataLoader(ds, batch_size=16, shuffle=True, num_workers=2)
    for epoch in range(2):
        n = 0
        for x, y in loader:
            step(model, opt, x, y)
            n += 1
        print(f"epoch {epoch}: {n} batches (tried {tried})")
