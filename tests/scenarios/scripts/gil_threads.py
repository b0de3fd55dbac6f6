"""feedline.Loader with argv[1] workers of type argv[2]; decode is pure-Python CPU work
(about 2.5 ms per sample, 20 per batch: five steps); the step is 4 ms of waiting for the device (a sleep).

Truth: data-bound on decode; with thread workers the decode runs one thread at a time
under the GIL (more threads add nothing); processes run it in parallel.
"""

import sys
import time

import feedline


class Samples:
    def __len__(self) -> int:
        return 4096

    def __getitem__(self, i: int) -> dict:
        import numpy as np

        return {"x": np.full((8,), float(i % 7), dtype=np.float32)}


def pydecode(sample: dict) -> dict:
    total = 0
    for k in range(60_000):  # pure Python: holds the GIL
        total += k * k
    return sample


if __name__ == "__main__":
    workers, kind = int(sys.argv[1]), sys.argv[2]
    loader = feedline.Loader(Samples(), batch_size=8, workers=workers, worker_type=kind,
                             shuffle=False, transform=pydecode)
    for _ in range(100):
        for _batch in loader:
            time.sleep(0.004)  # the device step: the host waits
