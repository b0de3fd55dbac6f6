"""A ``torch.compile``d model on CPU (``backend="aot_eager"``: no C compiler needed) fed
by a DataLoader with ``drop_last=False`` over 200 samples, batch 16: the epoch's last
batch has 8 rows, so the first epoch compiles twice (its first step, and again at its
last step for the new batch size, as dynamo recompiles on a changed shape); the second
epoch reuses both graphs. In-memory data, ``num_workers=0``; later steps take 30 ms (a
sleep pads the real one); 2 epochs of 13 batches.

Truth: compute-bound: both compiles are work of the step (the model), not the data path
and not a stall. The run is 26 steps whatever diagnose does.
"""

import time

import torch
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(24, 48), torch.nn.Tanh(), torch.nn.Linear(48, 4))
    cmodel = torch.compile(model, backend="aot_eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    dl = DataLoader(TensorDataset(torch.randn(200, 24), torch.randint(0, 4, (200,))),
                    batch_size=16, shuffle=True, drop_last=False)
    for epoch in range(2):
        sizes = []
        for x, y in dl:
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(cmodel(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.030 - (time.perf_counter() - t0)))
            sizes.append(len(y))
        print(f"epoch {epoch}: {len(sizes)} steps, last batch {sizes[-1]}")
