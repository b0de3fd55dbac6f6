"""The transfer-learning tutorial's loop: ``for phase in ["train", "val"]``, one dict of
DataLoaders, ``model.train()`` / ``model.eval()``, and autograd switched inside the loop
with ``with torch.set_grad_enabled(phase == "train"):`` (so both loaders are iterated
with autograd on), an optimizer step per training batch, ``scheduler.step()`` per epoch.
Few-shot fine-tuning: the training split is small (8 batches of 8, cheap samples, in
the training process, a 30 ms step), the validation split bigger (12 batches of 8, each sample 5 ms
of storage latency, 2 workers, a 2 ms evaluation step); 3 epochs.

Truth: the training loader is compute-bound; the validation loader (more steps, waiting
for its reads) is its own line.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class Images(Dataset):
    def __init__(self, n, read_s):
        self.n, self.read_s = n, read_s

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.read_s:
            time.sleep(self.read_s)
        return torch.full((3, 8, 8), float(i % 5)), i % 2


if __name__ == "__main__":
    torch.set_num_threads(1)
    dataloaders = {
        "train": DataLoader(Images(64, 0.0), batch_size=8, shuffle=True),
        "val": DataLoader(Images(96, 0.005), batch_size=8, shuffle=False, num_workers=2),
    }
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(192, 2))
    criterion = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=7, gamma=0.1)
    for epoch in range(3):
        for phase in ["train", "val"]:
            model.train() if phase == "train" else model.eval()
            corrects, batches = 0, 0
            for inputs, labels in dataloaders[phase]:
                t0 = time.perf_counter()
                optimizer.zero_grad()
                with torch.set_grad_enabled(phase == "train"):
                    outputs = model(inputs)
                    loss = criterion(outputs, labels)
                    if phase == "train":
                        loss.backward()
                        optimizer.step()
                corrects += int((outputs.argmax(1) == labels).sum())
                batches += 1
                time.sleep(max(0.0, (0.030 if phase == "train" else 0.002) - (time.perf_counter() - t0)))
            if phase == "train":
                scheduler.step()
            print(f"epoch {epoch} {phase}: {batches} batches")
