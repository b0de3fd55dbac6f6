"""No DataLoader at all: batches come from the user's own generator reading slow
storage (8 x 3 ms per batch) in the training thread; 5 ms step.

Truth: diagnose cannot see this loop's steps (it hooks DataLoader and feedline.Loader):
the verdict is "unknown", with the reason and the way to measure it (feedline.watch).
"""

import time

import torch


def batches(n: int):
    for i in range(n):
        rows = []
        for _ in range(8):
            time.sleep(0.003)
            rows.append(torch.randn(4))
        yield torch.stack(rows), torch.full((8,), float(i % 2))


if __name__ == "__main__":
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(2):
        for x, y in batches(20):
            loss = ((model(x).squeeze(1) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(0.005)
        print("epoch", epoch)
