"""CPU decode in workers started with the start method named by argv[1] (spawn, forkserver).

Truth: data-bound on decode: 8 x 4 ms of CPU per batch in one worker against a 5 ms step.
"""

import sys

from _common import Samples, Step
from torch.utils.data import DataLoader

if __name__ == "__main__":
    loader = DataLoader(Samples(4096, 8, decode_s=0.004), batch_size=8, num_workers=1,
                        multiprocessing_context=sys.argv[1], persistent_workers=True)
    step = Step(8, 0.005)
    for x, y in loader:
        step(x, y)
