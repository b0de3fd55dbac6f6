"""Ctrl-C handling: the loop runs inside ``try: ... except KeyboardInterrupt:`` that
saves a checkpoint and returns normally. The "user" presses Ctrl-C after 25 steps (the
script sends SIGINT to itself, as the terminal would to the training process).
DataLoader(num_workers=2), every sample 6 ms of storage latency, batch 8 (48 ms per
batch, 24 ms with two workers) against a 5 ms step.

Truth: data-bound on read; the script's own handler runs (checkpoint saved, exit 0).
"""

import os
import signal
import tempfile
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Remote(Dataset):
    def __len__(self):
        return 4000

    def __getitem__(self, i):
        time.sleep(0.006)
        return torch.randn(10), torch.randn(1)


def train(loader, model, opt, state):
    for x, y in loader:
        t0 = time.perf_counter()
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(max(0.0, 0.005 - (time.perf_counter() - t0)))
        state["step"] += 1
        if state["step"] == 25:
            os.kill(os.getpid(), signal.SIGINT)  # the user presses Ctrl-C


if __name__ == "__main__":
    # Ctrl-C raises KeyboardInterrupt even when started in the background of a
    # non-interactive shell (which leaves SIGINT ignored, and Python then keeps it so)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    loader = DataLoader(Remote(), batch_size=8, num_workers=2)
    model = torch.nn.Linear(10, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    state = {"step": 0}
    try:
        train(loader, model, opt, state)
    except KeyboardInterrupt:
        path = os.path.join(tempfile.mkdtemp(), "interrupted.pt")
        torch.save({"model": model.state_dict(), "step": state["step"]}, path)
        print(f"interrupted at step {state['step']}, saved {os.path.exists(path)}")
