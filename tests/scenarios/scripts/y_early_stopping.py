"""Early stopping with patience: after every epoch a ``torch.no_grad()`` validation pass
over its own DataLoader (1 worker, not persistent, 3 batches of 8 samples at 3 ms of
storage latency each), then ``if val_loss >= best: bad += 1; if bad == patience: break``.
The validation metric follows a fixed curve (so the stop epoch is the same in every run:
best at epoch 2, patience 2, stop after epoch 4). Training is compute-bound: an in-memory
TensorDataset in the training process (num_workers=0, batch 16), a 30 ms step, 10 steps
an epoch.

Truth: the training loader is compute-bound; the validation loader is its own line.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

CURVE = [0.90, 0.72, 0.61, 0.63, 0.62, 0.55, 0.50, 0.48]


class Held(Dataset):
    def __len__(self):
        return 24

    def __getitem__(self, i):
        time.sleep(0.003)
        return torch.randn(12), torch.randn(())


if __name__ == "__main__":
    train = DataLoader(TensorDataset(torch.randn(160, 12), torch.randn(160)), batch_size=16, shuffle=True)
    val = DataLoader(Held(), batch_size=8, num_workers=1)
    net = torch.nn.Linear(12, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    best, bad, patience = float("inf"), 0, 2
    for epoch in range(len(CURVE)):
        net.train()
        for x, y in train:
            t0 = time.perf_counter()
            loss = torch.nn.functional.mse_loss(net(x).squeeze(1), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.030 - (time.perf_counter() - t0)))
        net.eval()
        with torch.no_grad():
            real = sum(float(torch.nn.functional.mse_loss(net(x).squeeze(1), y)) for x, y in val)
        val_loss = CURVE[epoch] + 0.0 * real
        if val_loss < best:
            best, bad = val_loss, 0
        else:
            bad += 1
            if bad == patience:
                print(f"early stop after epoch {epoch} (best {best:.2f})")
                break
        print(f"epoch {epoch}: val {val_loss:.2f}")
