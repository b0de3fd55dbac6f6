"""feedline.Loader over shards packed from Python, with the user's decoder for a binary
field that hands each record to a process pool the module keeps for the whole run
(``decode={"bin": parse}`` where ``parse`` calls ``POOL.submit(...).result()``, as code
that wraps a slow C-extension parser in processes does), in 2 thread workers. Each record
is about 5 ms of CPU in a pool process (a measured spin); batch 8 (40 ms of CPU a batch;
about 20 ms over the 2 pool processes) against a 4 ms step; 2 epochs of 24 batches.

Truth: data-bound on decode: the thread workers wait on the pool, but the pool's
processes are on the CPU the whole time (a decoder, not storage). The run is 24 steps
whatever diagnose does.
"""

import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import torch

import feedline

POOL: ProcessPoolExecutor | None = None


def parse_slow(raw: bytes) -> np.ndarray:
    end = time.process_time() + 0.005
    acc = 0
    while time.process_time() < end:
        acc += 1
    return np.frombuffer(raw, dtype=np.float32).copy()


def parse(raw: bytes) -> np.ndarray:
    return POOL.submit(parse_slow, bytes(raw)).result()


def records():
    for i in range(192):
        yield {"__key__": f"rec-{i:04d}", "bin": np.full(6, i % 3, dtype=np.float32).tobytes(),
               "cls": i % 3}


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    POOL = ProcessPoolExecutor(max_workers=2)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "records")
        feedline.pack_samples(records(), out)
        loader = feedline.Loader(out, batch_size=8, workers=2, worker_type="thread",
                                 decode={"bin": parse}, seed=0)
        net = torch.nn.Linear(6, 3)
        opt = torch.optim.SGD(net.parameters(), lr=0.05)
        for epoch in range(2):
            loader.set_epoch(epoch)
            n = 0
            for batch in loader:
                t0 = time.perf_counter()
                x, y = torch.as_tensor(batch["bin"]), torch.as_tensor(batch["cls"])
                loss = torch.nn.functional.cross_entropy(net(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                time.sleep(max(0.0, 0.004 - (time.perf_counter() - t0)))
                n += 1
            print(f"epoch {epoch}: {n} batches")
    POOL.shutdown()
