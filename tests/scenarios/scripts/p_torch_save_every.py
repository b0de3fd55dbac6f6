"""A checkpoint every 8 steps the way most training scripts write it: the model and
the Adam optimizer's state (about 3 x 6 MB) to ``ckpt.pt.tmp`` with ``torch.save``,
then ``os.replace`` onto ``ckpt.pt``, then a 40 ms wait for the shared filesystem to
commit it (a sleep standing in for the network round trip). The loader is cheap
(in memory, 2 workers) against a 20 ms step; 48 steps (6 checkpoints).

Truth: compute-bound: the saves are the loop's own periodic work, not a wait for data.
The run is 48 steps whatever diagnose does.
"""

import os
import tempfile
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    loader = DataLoader(TensorDataset(torch.randint(0, 50000, (384,)), torch.randn(384)),
                        batch_size=8, shuffle=True, num_workers=2)
    emb = torch.nn.Embedding(50000, 32)
    head = torch.nn.Linear(32, 1)
    model = torch.nn.ModuleDict({"emb": emb, "head": head})
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    saved = 0
    with tempfile.TemporaryDirectory() as ckpt_dir:
        path = os.path.join(ckpt_dir, "ckpt.pt")
        for step, (ids, y) in enumerate(loader):
            t0 = time.perf_counter()
            loss = torch.nn.functional.mse_loss(head(emb(ids)).squeeze(1), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.020 - (time.perf_counter() - t0)))
            if (step + 1) % 8 == 0:
                torch.save({"model": model.state_dict(), "optim": opt.state_dict(),
                            "step": step + 1}, path + ".tmp")
                os.replace(path + ".tmp", path)
                time.sleep(0.040)
                saved += 1
        print(f"steps {step + 1} checkpoints {saved} size_mb {os.path.getsize(path) >> 20}")
