"""``torch.save`` of the model every 5 steps inside the loop: a blocking stall that is not
data. The model carries a 16 MB embedding table, so each save writes 16 MB, then waits
60 ms for the shared filesystem to commit it (a sleep standing in for the network
round trip), at least four times the step; the loader is in memory in the training
process (batch 16, no workers) against a 15 ms step; 60 steps.

Truth: compute-bound (the saves are the step's own time, not a wait for data); the saves
are named as periodic work in the loop.
"""

import os
import tempfile
import time

import torch
from torch.utils.data import DataLoader, TensorDataset


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.table = torch.nn.Embedding(1 << 16, 64)  # 16 MB of float32
        self.head = torch.nn.Linear(8, 1)

    def forward(self, x):
        return self.head(x).squeeze(1)


if __name__ == "__main__":
    torch.set_num_threads(1)
    dl = DataLoader(TensorDataset(torch.randn(960, 8), torch.randn(960)), batch_size=16, shuffle=True)
    model = Model()
    opt = torch.optim.SGD(model.head.parameters(), lr=1e-3)
    saves = 0
    with tempfile.TemporaryDirectory() as ckpt:
        for step, (x, y) in enumerate(dl):
            t0 = time.perf_counter()
            loss = ((model(x) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.015 - (time.perf_counter() - t0)))
            if step % 5 == 4:
                torch.save(model.state_dict(), os.path.join(ckpt, f"step{step + 1}.pt"))
                time.sleep(0.060)  # the shared filesystem commits the file
                saves += 1
        print(f"steps {step + 1} checkpoints {saves} files {len(os.listdir(ckpt))}")
