"""Data-bound by slow reads: storage latency 2 ms per sample x 8, in the training process."""

from _common import Samples, Step, train
from torch.utils.data import DataLoader

if __name__ == "__main__":
    data = Samples(4096, 32, read_s=0.002)
    train(DataLoader(data, batch_size=8, num_workers=0), Step(32, 0.004))
