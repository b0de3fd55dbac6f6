"""Workers that each open a connection to a feature store in ``worker_init_fn`` (a
400 ms handshake, a sleep) and keep it, started with ``multiprocessing_context="spawn"``
(2 workers, ``persistent_workers=True``: each spawned worker imports torch and the
script before its handshake, one after the other on a busy host). Lookups through the
open connection are fast (well under a millisecond a batch); the step is 60 ms (a sleep
pads the real one); 3 epochs of 12 batches.

Truth: compute-bound: the workers' start (spawn, import, handshake) before they deliver
their first batches is warm-up, not a stall of the training loop. The run is 36 steps
whatever diagnose does.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info


class FeatureStore(Dataset):
    def __init__(self) -> None:
        self.conn = None

    def connect(self) -> None:
        time.sleep(0.4)  # TLS handshake and auth with the store
        self.conn = {"session": get_worker_info().id}

    def __len__(self) -> int:
        return 192

    def __getitem__(self, i):
        assert self.conn is not None
        return torch.full((16,), float(i % 5)), torch.tensor(i % 4)


def init_worker(worker_id: int) -> None:
    get_worker_info().dataset.connect()


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    loader = DataLoader(FeatureStore(), batch_size=16, shuffle=True, num_workers=2,
                        persistent_workers=True, worker_init_fn=init_worker,
                        multiprocessing_context="spawn")
    net = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    for epoch in range(3):
        n = 0
        for x, y in loader:
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.060 - (time.perf_counter() - t0)))
            n += 1
        print(f"epoch {epoch}: {n} batches")
