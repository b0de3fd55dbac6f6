"""Batch inference that writes its predictions: no optimizer and no backward pass,
``model.eval()`` and ``torch.no_grad()`` around the loop, and each batch's predictions
saved with ``np.save`` into a file that is flushed, ``os.fsync``-ed and then committed
to a shared filesystem (a 30 ms sleep standing in for the network round trip). The data
is an in-memory TensorDataset (batch 64, 1 worker: well under a millisecond a batch);
40 batches.

Truth: not data-bound. The loop is bound by its own write (30 ms a batch), the loader
has batches ready long before they are asked for; "compute-bound" in diagnose's words
(the step, here the write, binds). 40 batches, 40 files whatever diagnose does.
"""

import os
import sys
import tempfile
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    torch.set_num_threads(1)
    data = TensorDataset(torch.randn(64 * 40, 16))
    loader = DataLoader(data, batch_size=64, num_workers=1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    model.eval()
    out = tempfile.mkdtemp(prefix="preds-")
    n = 0
    with torch.no_grad():
        for (x,) in loader:
            preds = model(x).argmax(1).numpy()
            path = os.path.join(out, f"part-{n:05d}.npy")
            with open(path, "wb") as f:
                np.save(f, preds)
                f.flush()
                os.fsync(f.fileno())
            time.sleep(0.03)  # the shared filesystem commits the part
            n += 1
    files = len(os.listdir(out))
    for name in os.listdir(out):
        os.unlink(os.path.join(out, name))
    os.rmdir(out)
    print(f"batches {n} files {files}")
    sys.stdout.flush()
