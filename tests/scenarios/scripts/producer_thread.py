"""A producer thread iterates the loader and feeds a queue; the main thread trains.

Truth: data-bound on read: one worker needs 8 x 5 ms of storage latency per batch,
the step takes 10 ms.
"""

import queue
import threading

from _common import Samples, Step
from torch.utils.data import DataLoader

if __name__ == "__main__":
    loader = DataLoader(Samples(4096, 8, read_s=0.005), batch_size=8, num_workers=1)
    q: queue.Queue = queue.Queue(maxsize=4)

    def produce() -> None:
        for batch in loader:
            q.put(batch)
        q.put(None)

    step = Step(8, 0.010)
    step(*next(iter(DataLoader(Samples(8, 8), batch_size=8))))  # the model is ready first
    threading.Thread(target=produce, daemon=True).start()
    while (batch := q.get()) is not None:
        step(*batch)
