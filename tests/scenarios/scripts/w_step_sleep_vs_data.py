"""The same loop with the sleep in one of two places (argv[1]): ``step`` puts 30 ms in
the training step (a stand-in for a slow GPU) and 1 ms per batch in the dataset;
``data`` puts 30 ms per batch in the dataset (storage) and 3 ms in the step. In the
training process (num_workers=0), 25 steps.

Truth: step: compute-bound; data: data-bound on read.
"""

import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

MODE = sys.argv[1] if len(sys.argv) > 1 else "step"
DATA_S, STEP_S = (0.001, 0.030) if MODE == "step" else (0.030, 0.003)


class DS(Dataset):
    def __len__(self):
        return 100

    def __getitem__(self, i):
        if i % 4 == 0:
            time.sleep(DATA_S)
        return torch.ones(2)


if __name__ == "__main__":
    dl = DataLoader(DS(), batch_size=4)
    model = torch.nn.Linear(2, 1)
    n = 0
    for x in dl:
        model(x).sum().backward()
        time.sleep(STEP_S)
        n += 1
    print(MODE, n)
