"""Epoch restarts: a tutorial loop over 4 epochs of 12 batches; 2 workers whose start-up
loads a per-worker index (``worker_init_fn`` sleeps 250 ms, standing in for opening files
or reading a label table); 20 ms step; ``persistent_workers`` from argv[1] (default 0).

Truth: without persistent workers every epoch starts its workers again, so the first batch
of each epoch waits about 250 ms while the other batches are ready (each takes about 2 ms
to prepare against a 20 ms step); with ``persistent_workers=True`` only the first epoch
pays it (warm-up).
"""

import sys
import time

from _common import Samples, Step
from torch.utils.data import DataLoader


def load_index(_worker: int) -> None:
    time.sleep(0.25)  # storage latency of the per-worker start-up


if __name__ == "__main__":
    persistent = bool(int(sys.argv[1])) if len(sys.argv) > 1 else False
    data = Samples(96, 8, read_s=0.00025)
    loader = DataLoader(data, batch_size=8, num_workers=2, worker_init_fn=load_index,
                        persistent_workers=persistent)
    step = Step(8, 0.020)
    for _epoch in range(4):
        for x, y in loader:
            step(x, y)
