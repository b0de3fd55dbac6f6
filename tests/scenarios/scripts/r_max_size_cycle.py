"""Two data sources of unequal length combined the way Lightning's
``CombinedLoader(mode="max_size_cycle")`` does, written by hand: the loop runs over the
long in-memory loader (30 batches an epoch) and restarts the short one (6 batches) each
time it runs out, ``iter(short)`` again inside the loop. The short loader reads from
slow storage (every sample 5 ms, a sleep) in 2 persistent workers (a restart resumes
them, it does not start new ones); batch 8 (about 20 ms a batch with 2 workers) against
a 4 ms step; 2 epochs.

Truth: data-bound on read: every step waits for the short, slow loader (the long one is
always ready). The run is 60 steps and 8 restarts of the short loader whatever diagnose
does.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset


class Remote(Dataset):
    def __len__(self) -> int:
        return 48

    def __getitem__(self, i):
        time.sleep(0.005)
        return torch.full((4,), float(i % 3))


def max_size_cycle(long, short):
    it_short = iter(short)
    restarts = 0
    for a in long:
        try:
            b = next(it_short)
        except StopIteration:
            it_short = iter(short)
            restarts += 1
            b = next(it_short)
        yield a, b, restarts


if __name__ == "__main__":
    torch.set_num_threads(1)
    long = DataLoader(TensorDataset(torch.randn(240, 4), torch.randint(0, 2, (240,))),
                      batch_size=8, shuffle=True)
    short = DataLoader(Remote(), batch_size=8, shuffle=True, num_workers=2,
                       persistent_workers=True)
    net = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    total = restarts_total = 0
    for epoch in range(2):
        n = restarts = 0
        for (x, y), u, restarts in max_size_cycle(long, short):  # noqa: B007 (read after)
            t0 = time.perf_counter()
            sup = torch.nn.functional.cross_entropy(net(x), y)
            cons = (net(u).softmax(-1) - net(u + 0.01).softmax(-1)).pow(2).mean()
            loss = sup + cons
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.004 - (time.perf_counter() - t0)))
            n += 1
        total += n
        restarts_total += restarts
        print(f"epoch {epoch}: {n} steps, short loader restarted {restarts} times")
    print(f"steps {total} restarts {restarts_total}")
