"""Training (compute-bound: in-memory samples, in-process, 30 ms step) with a validation
loader run every 10 steps: 6 batches of 2 x 12 ms storage latency each in-process plus a
12 ms evaluation step (about a third of the wall time).

Truth: the training loader is compute-bound; the validation loader is its own line,
waiting for data about half of its time.
"""

import time

import torch
from _common import Samples, Step
from torch.utils.data import DataLoader

if __name__ == "__main__":
    train = DataLoader(Samples(4096, 8), batch_size=8)
    val = DataLoader(Samples(12, 8, read_s=0.006), batch_size=2)
    step = Step(8, 0.030)
    for k, (x, y) in enumerate(train):
        step(x, y)
        if k % 10 == 9:
            with torch.no_grad():
                for _batch in val:
                    time.sleep(0.012)
