"""Balanced: one worker makes a batch in ~30 ms (one 30 ms storage round trip), the step takes 40 ms.

The data path needs three quarters of the step: it keeps up, with little headroom.
"""

from _common import Samples, Step, train
from torch.utils.data import DataLoader

if __name__ == "__main__":
    data = Samples(4096, 32, batch_read_s=0.030, batch=8)
    loader = DataLoader(data, batch_size=8, num_workers=1, persistent_workers=True)
    train(loader, Step(32, 0.040))
