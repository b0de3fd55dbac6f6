"""The training loop wrapped in ``torch.profiler.profile`` with a schedule
(wait 2, warmup 2, active 4, repeat 1), ``prof.step()`` after every batch and
``record_function`` around the forward pass; the trace is exported at the end.
DataLoader(num_workers=1), every sample 5 ms of storage latency, batch 8 (40 ms per
batch) against a 6 ms step; 30 steps.

Truth: data-bound on read; the profiler does not hide the loader from diagnose.
"""

import os
import tempfile
import time

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule
from torch.utils.data import DataLoader, Dataset


class Remote(Dataset):
    def __len__(self):
        return 240

    def __getitem__(self, i):
        time.sleep(0.005)
        return torch.randn(16), torch.randn(1)


if __name__ == "__main__":
    loader = DataLoader(Remote(), batch_size=8, num_workers=1)
    model = torch.nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    out = tempfile.mkdtemp()
    steps = 0
    with profile(activities=[ProfilerActivity.CPU],
                 schedule=schedule(wait=2, warmup=2, active=4, repeat=1)) as prof:
        for x, y in loader:
            t0 = time.perf_counter()
            with record_function("forward"):
                loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.006 - (time.perf_counter() - t0)))
            prof.step()
            steps += 1
    prof.export_chrome_trace(os.path.join(out, "trace.json"))
    print(f"steps {steps} trace {os.path.getsize(os.path.join(out, 'trace.json')) > 0}")
