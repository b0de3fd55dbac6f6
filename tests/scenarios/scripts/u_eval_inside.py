"""Training (compute-bound: 2 workers, cheap samples, 40 ms step) with a no_grad
evaluation every 15 steps over a validation DataLoader whose 2 workers start anew each
time (not persistent), each val sample 2 ms of storage latency; 2 epochs of 45 steps.

Truth: the training loader is compute-bound; the validation loader is its own line.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class Synthetic(Dataset):
    def __init__(self, n: int, latency: float) -> None:
        self.n, self.latency = n, latency

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        if self.latency:
            time.sleep(self.latency)
        return torch.randn(10), torch.randint(0, 3, ()).item()


def evaluate(model, loader) -> float:
    model.eval()
    hits = 0
    with torch.no_grad():
        for x, y in loader:
            hits += int((model(x).argmax(1) == y).sum())
    model.train()
    return hits / len(loader.dataset)


if __name__ == "__main__":
    train_loader = DataLoader(Synthetic(360, 0.0), batch_size=8, shuffle=True, num_workers=2,
                              persistent_workers=True)
    val_loader = DataLoader(Synthetic(32, 0.002), batch_size=8, num_workers=2)
    model = torch.nn.Linear(10, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for step, (x, y) in enumerate(train_loader):
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.040 - (time.perf_counter() - t0)))
            if step % 15 == 14:
                evaluate(model, val_loader)
        print(f"epoch {epoch}: {step + 1} steps")
