"""feedline.Loader with 2 process workers in a straggler setting: 1 sample in 50 waits
100 ms for storage (a cold object), the others cost 0.2 ms of CPU; batch 16 (about
35 ms of work per batch on average, about 18 ms with two workers) against a 3 ms step;
60 steps.
``torch.set_num_threads(1)`` in the training process (a small model).

Truth: data-bound on read (the stragglers' waits are most of the data path).
"""

import time

import numpy as np
import torch

import feedline


class Objects:
    def __len__(self):
        return 4000

    def __getitem__(self, i):
        if i % 50 == 7:
            time.sleep(0.100)
        end = time.thread_time() + 0.0002
        while time.thread_time() < end:
            pass
        return {"x": np.full((8,), i % 11, dtype=np.float32), "y": np.int64(i % 3)}


if __name__ == "__main__":
    torch.set_num_threads(1)  # a small model: the intra-op pool only spins on a busy host
    loader = feedline.Loader(Objects(), batch_size=16, workers=2, worker_type="process", seed=0)
    net = torch.nn.Linear(8, 3)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    steps = 0
    for batch in loader:
        t0 = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(net(torch.as_tensor(batch["x"])),
                                                 torch.as_tensor(batch["y"]))
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(max(0.0, 0.003 - (time.perf_counter() - t0)))
        steps += 1
        if steps == 60:
            break
    print("steps", steps)
