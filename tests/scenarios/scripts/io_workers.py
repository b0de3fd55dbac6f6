"""I/O-bound DataLoader: argv[1] workers, each batch one 60 ms storage round trip; 10 ms step.

Truth: data-bound on read at 1 worker; 6 workers would keep up although the host may
have fewer cores (a sleeping worker holds no core).
"""

import sys

from _common import Samples, Step
from torch.utils.data import DataLoader

if __name__ == "__main__":
    workers = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    loader = DataLoader(Samples(4096, 8, batch_read_s=0.060, batch=8), batch_size=8,
                        num_workers=workers, persistent_workers=workers > 0)
    step = Step(8, 0.010)
    for x, y in loader:
        step(x, y)
