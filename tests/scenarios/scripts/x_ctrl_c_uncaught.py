"""Ctrl-C that nobody catches: after 20 steps the "user" interrupts the run (SIGINT to
the training process, as a terminal sends it) and the KeyboardInterrupt ends the script
with a traceback; Python then ends itself by SIGINT, so a shell sees status 130.
DataLoader(num_workers=1), every sample 5 ms of storage latency, batch 8 (40 ms per
batch) against a 5 ms step.

Truth: data-bound on read; exit status 130, as without diagnose.
"""

import signal
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Remote(Dataset):
    def __len__(self):
        return 4000

    def __getitem__(self, i):
        time.sleep(0.005)
        return torch.randn(6)


if __name__ == "__main__":
    # Ctrl-C raises KeyboardInterrupt even when started in the background of a
    # non-interactive shell (which leaves SIGINT ignored, and Python then keeps it so)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    loader = DataLoader(Remote(), batch_size=8, num_workers=1)
    model = torch.nn.Linear(6, 1)
    for step, x in enumerate(loader):
        t0 = time.perf_counter()
        model(x).sum().backward()
        time.sleep(max(0.0, 0.005 - (time.perf_counter() - t0)))
        if step == 19:
            print("steps 20", flush=True)
            signal.raise_signal(signal.SIGINT)  # the user presses Ctrl-C
