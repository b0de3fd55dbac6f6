"""Detection-style validation: variable-size images, so the validation loader runs with
``batch_size=1`` after every epoch under ``torch.no_grad()`` (40 images, each 5 ms of
storage latency, 2 workers, a 2 ms evaluation step), while training takes 12 steps an
epoch (batch 16, in memory, in the training process, a 30 ms step); 3 epochs. The
validation loader takes more steps (120) than the training one (36).

Truth: the training loader is compute-bound; the validation loader is its own line.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset


class ValImages(Dataset):
    def __len__(self):
        return 40

    def __getitem__(self, i):
        time.sleep(0.005)
        side = 8 + i % 5  # every image its own size: no batching
        return torch.randn(3, side, side), torch.tensor(i % 4)


if __name__ == "__main__":
    torch.set_num_threads(1)
    train = DataLoader(TensorDataset(torch.randn(192, 3, 8, 8), torch.randint(0, 4, (192,))),
                       batch_size=16, shuffle=True)
    val = DataLoader(ValImages(), batch_size=1, num_workers=2)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.AdaptiveAvgPool2d(1),
                              torch.nn.Flatten(), torch.nn.Linear(4, 4))
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    for epoch in range(3):
        net.train()
        steps = 0
        for x, y in train:
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.030 - (time.perf_counter() - t0)))
            steps += 1
        net.eval()
        correct = 0
        with torch.no_grad():
            for x, y in val:
                t0 = time.perf_counter()
                correct += int(net(x).argmax(1) == y)
                time.sleep(max(0.0, 0.002 - (time.perf_counter() - t0)))
        print(f"epoch {epoch}: {steps} steps, validated {len(val)} images")
