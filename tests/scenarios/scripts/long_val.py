"""A training loop that validates early and long: after 5 training steps (and every 10
after), a full pass over 30 validation batches (in memory, a 1 ms evaluation step), then
training goes on (in-memory samples, a 20 ms step).

Truth: the training loader is compute-bound, and ``--steps N`` counts its steps only: the
validation loader reaches N steps first (in its first pass), which must not end the run.
The script prints how many training steps it took before diagnose ended it.
"""

import atexit
import time

import torch
from _common import Samples, Step
from torch.utils.data import DataLoader

if __name__ == "__main__":
    train = DataLoader(Samples(4096, 8), batch_size=8)
    val = DataLoader(Samples(240, 8), batch_size=8)
    step = Step(8, 0.020)
    taken = [0]
    atexit.register(lambda: print(f"training steps: {taken[0]}", flush=True))
    for k, (x, y) in enumerate(train):
        step(x, y)
        taken[0] += 1
        if k % 10 == 4:
            with torch.no_grad():
                for _batch in val:
                    time.sleep(0.001)
