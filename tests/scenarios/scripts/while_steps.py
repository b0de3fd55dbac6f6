"""A ``while k < steps`` loop over a re-created iterator (40 steps of 4-batch epochs).

Truth: data-bound on read (num_workers=0, 4 x 4 ms of storage latency per batch against
a 4 ms step).
"""

from _common import Samples, Step
from torch.utils.data import DataLoader

if __name__ == "__main__":
    loader = DataLoader(Samples(16, 8, read_s=0.004), batch_size=4)
    step, k, it = Step(8, 0.004), 0, None
    while k < 40:
        try:
            x, y = next(it) if it is not None else next(iter(()))
        except StopIteration:
            it = iter(loader)
            continue
        step(x, y)
        k += 1
    print("steps:", k, flush=True)
