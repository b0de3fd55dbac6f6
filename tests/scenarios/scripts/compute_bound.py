"""Compute-bound: one worker makes a batch in ~4 ms, the step takes 120 ms."""

from _common import Samples, Step, train
from torch.utils.data import DataLoader

if __name__ == "__main__":
    data = Samples(4096, 32, read_s=0.0005)
    loader = DataLoader(data, batch_size=8, num_workers=1, persistent_workers=True)
    train(loader, Step(32, 0.120))
