"""Three epochs of 10 batches, persistent workers, OneCycleLR(total_steps=len(loader) * 3).

Truth: compute-bound (a 1 ms read per batch in one worker against a 30 ms step). The
script prints the batches of each epoch; the scheduler raises if it steps too often.
"""

import torch
from _common import Samples, Step
from torch.utils.data import DataLoader

if __name__ == "__main__":
    loader = DataLoader(Samples(80, 16, batch_read_s=0.001, batch=8), batch_size=8,
                        num_workers=1, persistent_workers=True)
    step = Step(16, 0.030)
    sched = torch.optim.lr_scheduler.OneCycleLR(step.opt, max_lr=0.1, total_steps=len(loader) * 3)
    counts = []
    for _ in range(3):
        n = 0
        for x, y in loader:
            step(x, y)
            sched.step()
            n += 1
        counts.append(n)
    print("epochs:", " ".join(map(str, counts)), flush=True)
