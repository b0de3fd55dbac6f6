"""A step that slows down as the run goes on (a leak: every step appends its output,
graph and all, to ``history`` and a running statistic is recomputed over the whole
history, so step k costs 2 ms + 0.25 ms x k: 2 ms at first, 17 ms at step 60). The data
cost is steady: 1 worker, every sample 6 ms of storage latency, batch 8 (48 ms a
batch); 60 steps.

Truth: data-bound on read: even the slowest, last step (17 ms) is about a third of the
48 ms a batch takes, so the loop waits throughout (stall about 0.6-0.95). The run is 60
steps whatever diagnose does.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class Bucket(Dataset):
    def __len__(self) -> int:
        return 480

    def __getitem__(self, i):
        time.sleep(0.006)
        return torch.full((8,), float(i % 9)), torch.tensor(float(i % 2))


if __name__ == "__main__":
    torch.set_num_threads(1)
    net = torch.nn.Linear(8, 1)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    loader = DataLoader(Bucket(), batch_size=8, num_workers=1)
    history = []
    steps = 0
    for x, y in loader:
        t0 = time.perf_counter()
        out = net(x).squeeze(1)
        loss = ((out - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        history.append(out)  # the leak: the output and its graph kept alive
        torch.stack([h.detach().mean() for h in history]).mean()
        cost = 0.002 + 0.00025 * steps
        time.sleep(max(0.0, cost - (time.perf_counter() - t0)))
        steps += 1
    print(f"steps {steps} history {len(history)}")
