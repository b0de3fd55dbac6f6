"""A checkpoint every 5 steps (an 8 ms blocked save), reported as its own stage.

Truth: compute-bound (in-memory samples loaded in-process, 20 ms step); ``checkpoint``
shows up as a stage line of its own.
"""

import time

from _common import Samples, Step
from torch.utils.data import DataLoader

from feedline import spans

if __name__ == "__main__":
    loader = DataLoader(Samples(4096, 8), batch_size=8)
    step = Step(8, 0.020)
    for k, (x, y) in enumerate(loader):
        step(x, y)
        if k % 5 == 4:
            with spans.span("checkpoint"):
                time.sleep(0.008)
