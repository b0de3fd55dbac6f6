"""Corrupt records are dropped in ``collate_fn`` (samples that come back ``None`` are
filtered out, the forum recipe), and the loop skips a batch with ``continue`` when
nothing is left; one record in four is corrupt, and the last 32 records (4 whole batches)
are corrupt. The dataset reads each record from slow storage (5 ms, a sleep) in 2
workers, batch 8 (about 20 ms a batch with 2 workers) against a 4 ms step; 2 epochs of
20 batches, 4 of them empty each.

Truth: data-bound on read. The run is 32 steps and 8 skipped batches whatever diagnose
does.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.dataloader import default_collate


class Records(Dataset):
    def __len__(self) -> int:
        return 160

    def __getitem__(self, i):
        time.sleep(0.005)
        if i % 4 == 3 or 128 <= i < 160:
            return None  # failed checksum
        return torch.full((6,), float(i % 5)), torch.tensor(i % 2)


def drop_bad(batch):
    batch = [b for b in batch if b is not None]
    return default_collate(batch) if batch else None


if __name__ == "__main__":
    torch.set_num_threads(1)
    net = torch.nn.Linear(6, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    loader = DataLoader(Records(), batch_size=8, shuffle=False, num_workers=2,
                        collate_fn=drop_bad)
    steps = skipped = 0
    for _epoch in range(2):
        for batch in loader:
            if batch is None:
                skipped += 1
                continue
            x, y = batch
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.004 - (time.perf_counter() - t0)))
            steps += 1
    print(f"steps {steps} skipped {skipped}")
