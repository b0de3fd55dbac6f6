"""Tail stalls: one batch in 16 has a 300 ms storage stall, the others take 1 ms; 2 workers;
25 ms step; prefetch_factor from argv[1] (default 2).

Truth: the workers keep up on average (the slow worker is busy about 310 ms of each 400 ms
cycle of 16 steps), but with the default prefetch each slow batch stalls the step for about
200 ms: data-bound, by the tail; a prefetch deep enough to cover 300 ms hides it.
"""

import sys

from _common import Samples, Step
from torch.utils.data import DataLoader

if __name__ == "__main__":
    pf = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    data = Samples(16384, 8, read_s=0.000125, slow_every=16, slow_s=0.300, batch=8)
    loader = DataLoader(data, batch_size=8, num_workers=2, prefetch_factor=pf,
                        persistent_workers=True)
    step = Step(8, 0.025)
    for x, y in loader:
        step(x, y)
