"""``it = iter(loader)`` again every 10 steps (a habit from code that re-seeds or
re-shards its data every "round"), abandoning the old iterator half-way. The loader has
2 workers that are not persistent, and each worker opens a connection in its
``worker_init_fn`` (400 ms, a sleep standing in for a database login); samples are
in memory afterwards. Step about 8 ms; 40 steps in 4 rounds.

Truth: data-bound, bound by start-up: each round waits about 400 ms for new workers
against about 80 ms of steps. The run is 40 steps and 4 iterators whatever diagnose
does.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class Rows(Dataset):
    def __len__(self) -> int:
        return 400

    def __getitem__(self, i):
        return torch.full((6,), float(i % 5)), torch.tensor(i % 3)


def connect(worker_id: int) -> None:
    time.sleep(0.4)  # log in to the database


if __name__ == "__main__":
    torch.set_num_threads(1)
    loader = DataLoader(Rows(), batch_size=8, shuffle=True, num_workers=2,
                        worker_init_fn=connect)
    net = torch.nn.Linear(6, 3)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    iterators = 0
    for step in range(40):
        if step % 10 == 0:
            it = iter(loader)
            iterators += 1
        x, y = next(it)
        t0 = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(max(0.0, 0.008 - (time.perf_counter() - t0)))
    print(f"steps 40 iterators {iterators}")
