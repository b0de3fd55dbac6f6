"""random_split into train / val Subsets; 1 worker doing 3 ms of CPU work per sample
(augmentation), batch 8 (24 ms per batch) against an 8 ms step; a validation pass under
torch.no_grad() at the end of each of 2 epochs.

Truth: the training loader is data-bound on decode (CPU), waiting about two thirds of
the time.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset, random_split


def augment(x: torch.Tensor, cpu_s: float) -> torch.Tensor:
    end = time.thread_time() + cpu_s
    while time.thread_time() < end:
        x = x * 0.999 + 0.001
    return x


class Images(Dataset):
    def __len__(self) -> int:
        return 400

    def __getitem__(self, i):
        return augment(torch.full((3, 8, 8), float(i % 10)), 0.003), i % 10


if __name__ == "__main__":
    torch.set_num_threads(1)
    train_set, val_set = random_split(Images(), [320, 80], generator=torch.Generator().manual_seed(0))
    train_loader = DataLoader(train_set, batch_size=8, shuffle=True, num_workers=1,
                              persistent_workers=True)
    val_loader = DataLoader(val_set, batch_size=40)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(192, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(2):
        model.train()
        for x, y in train_loader:
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.008 - (time.perf_counter() - t0)))
        model.eval()
        correct = 0
        with torch.no_grad():
            for x, y in val_loader:
                correct += int((model(x).argmax(1) == y).sum())
        print(f"epoch {epoch}: val batches {len(val_loader)}")
