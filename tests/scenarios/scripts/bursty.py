"""Bursty: batches take ~1 ms except every 8th (400 ms); 2 workers, 40 ms step.

The mean batch time per worker (~25 ms) is below the step, so averages look
fine, yet the slow batch stalls the step: the p99 of the wait shows it.
"""

from _common import Samples, Step, train
from torch.utils.data import DataLoader

if __name__ == "__main__":
    data = Samples(4096, 32, slow_every=8, slow_s=0.400, batch=8)
    loader = DataLoader(data, batch_size=8, num_workers=2, persistent_workers=True)
    train(loader, Step(32, 0.040))
