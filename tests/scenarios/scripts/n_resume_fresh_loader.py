"""A run resumed from a mid-epoch checkpoint the way ``accelerate``'s
``skip_first_batches`` does it: the rest of the interrupted epoch comes from a second
DataLoader over the same dataset whose ``batch_sampler`` skips the batches already
trained on (``SkipBatchSampler`` over the epoch's seeded ``BatchSampler``), built in a
helper; the later epochs use the ordinary DataLoader made at the top of the script. Both
have 2 workers (the ordinary one's persistent); each sample is 8 ms of storage latency (a
sleep), batch 8 (64 ms a batch, 32 ms with two workers) against a 4 ms step. The
checkpoint says epoch 0, 7 batches done: 13 more batches in the resumed epoch, then 2
fresh epochs of 20.

Truth: data-bound on read: both loaders are the one training data path. The run is 53
steps whatever diagnose does.
"""

import time

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, Sampler


class Remote(Dataset):
    def __len__(self):
        return 160

    def __getitem__(self, i):
        time.sleep(0.008)  # a sample from slow storage
        return torch.full((8,), float(i % 5)), torch.tensor(i % 2)


class SkipBatchSampler(Sampler):
    def __init__(self, batch_sampler, skip_batches):
        self.batch_sampler, self.skip_batches = batch_sampler, skip_batches

    def __iter__(self):
        for k, batch in enumerate(self.batch_sampler):
            if k >= self.skip_batches:
                yield batch

    def __len__(self):
        return len(self.batch_sampler) - self.skip_batches


def skip_first_batches(loader, epoch, num_batches):
    gen = torch.Generator().manual_seed(1000 + epoch)
    batches = BatchSampler(RandomSampler(loader.dataset, generator=gen), loader.batch_size,
                           drop_last=loader.drop_last)
    return DataLoader(loader.dataset, batch_sampler=SkipBatchSampler(batches, num_batches),
                      num_workers=loader.num_workers)


def train_epoch(net, opt, batches):
    n = 0
    for x, y in batches:
        t0 = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(max(0.0, 0.004 - (time.perf_counter() - t0)))
        n += 1
    return n


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    train_loader = DataLoader(Remote(), batch_size=8, shuffle=True, num_workers=2,
                              persistent_workers=True)
    net = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    checkpoint = {"epoch": 0, "batches_done": 7}  # as read back from the checkpoint file
    steps = 0
    for epoch in range(checkpoint["epoch"], 3):
        if epoch == checkpoint["epoch"]:
            batches = skip_first_batches(train_loader, epoch, checkpoint["batches_done"])
        else:
            batches = train_loader
        n = train_epoch(net, opt, batches)
        steps += n
        print(f"epoch {epoch}: {n} batches")
    print("steps", steps)
