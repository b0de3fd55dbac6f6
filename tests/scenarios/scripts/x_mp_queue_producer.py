"""No DataLoader: a ``multiprocessing.Process`` reads batches from slow storage (30 ms
per batch) into a ``multiprocessing.Queue``; the main process trains on ``q.get()``
(a 5 ms step) until the producer sends ``None``; 30 batches.

Truth: feedline cannot see this data path (no loader to hook): an honest unknown that
says how to measure it.
"""

import multiprocessing as mp
import time

import numpy as np
import torch


def produce(q, n):
    for i in range(n):
        time.sleep(0.030)  # reading a batch from storage
        q.put(np.full((8, 6), float(i % 5), dtype=np.float32))
    q.put(None)


if __name__ == "__main__":
    q = mp.Queue(maxsize=4)
    p = mp.Process(target=produce, args=(q, 30), daemon=True)
    p.start()
    model = torch.nn.Linear(6, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    steps = 0
    while (batch := q.get()) is not None:
        t0 = time.perf_counter()
        loss = model(torch.from_numpy(batch)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(max(0.0, 0.005 - (time.perf_counter() - t0)))
        steps += 1
    p.join()
    print(f"steps {steps} producer exit {p.exitcode}")
