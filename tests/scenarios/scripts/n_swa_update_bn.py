"""Stochastic weight averaging as the PyTorch docs write it: ``swa_model =
torch.optim.swa_utils.AveragedModel(model)``, ``SWALR`` from epoch 2, ``swa_model.
update_parameters(model)`` after each SWA epoch, and at the end
``torch.optim.swa_utils.update_bn(loader, swa_model)``: one more pass over the training
loader, forward only under no_grad, to recompute the BatchNorm statistics. The data is
in memory (``TensorDataset``, ``num_workers=0``, well under a millisecond a batch); each
training step takes 25 ms (a sleep pads the real one); 4 epochs of 8 batches, then the
update_bn pass (8 forward passes, about a millisecond each).

Truth: compute-bound. The run is 32 training steps and one update_bn pass whatever
diagnose does.
"""

import time

import torch
from torch.optim.swa_utils import SWALR, AveragedModel, update_bn
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.BatchNorm1d(32),
                                torch.nn.ReLU(), torch.nn.Linear(32, 3))
    loader = DataLoader(TensorDataset(torch.randn(256, 16), torch.randint(0, 3, (256,))),
                        batch_size=32, shuffle=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=4)
    swa_model = AveragedModel(model)
    swa_sched = SWALR(opt, swa_lr=0.05)
    swa_start, steps = 2, 0
    for epoch in range(4):
        for x, y in loader:
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.025 - (time.perf_counter() - t0)))
            steps += 1
        if epoch >= swa_start:
            swa_model.update_parameters(model)
            swa_sched.step()
        else:
            sched.step()
    update_bn(loader, swa_model)
    print(f"steps {steps} swa models averaged {int(swa_model.n_averaged)}")
