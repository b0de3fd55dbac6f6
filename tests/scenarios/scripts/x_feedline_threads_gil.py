"""feedline.Loader with 4 thread workers over a dataset whose ``__getitem__`` builds a
PIL image, resizes it and then runs a numpy post-processing loop in Python (5 ms of CPU
per sample, mostly Python holding the GIL: the threads take turns). Batch 8 (40 ms of CPU
per batch; at best 20 ms on two cores, with no GIL) against a 4 ms step; 40 steps.

Truth: data-bound on decode (CPU in the dataset): 40 ms of CPU per batch against a
4 ms step, however the threads share the GIL (the numpy calls release it now and then,
so the threads are partly parallel; the training thread waits for the GIL or a core
inside its step).
"""

import time

import numpy as np
import torch
from PIL import Image

import feedline


class Tiles:
    def __len__(self):
        return 2048

    def __getitem__(self, i):
        img = Image.fromarray(np.full((32, 32, 3), i % 255, dtype=np.uint8)).resize((16, 16))
        a = np.asarray(img, dtype=np.float32)
        end = time.thread_time() + 0.005
        while time.thread_time() < end:  # small numpy ops from Python: the GIL is held
            a = np.clip(a * 1.0001 - 0.01, 0, 255)
        return {"x": a.mean(axis=(0, 1)), "y": np.int64(i % 4)}


if __name__ == "__main__":
    loader = feedline.Loader(Tiles(), batch_size=8, workers=4, worker_type="thread")
    model = torch.nn.Linear(3, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    steps = 0
    for batch in loader:
        t0 = time.perf_counter()
        x, y = torch.as_tensor(batch["x"]), torch.as_tensor(batch["y"])
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(max(0.0, 0.004 - (time.perf_counter() - t0)))
        steps += 1
        if steps == 40:
            break
    print("steps", steps)
