"""GPU-style augmentation written the kornia way: an ``nn.Sequential`` of batch ops
(random flip, brightness/contrast jitter, a Gaussian blur as a depthwise ``conv2d``)
applied to the whole batch tensor in the training loop, after the batch arrives and
before ``model(x)``; on this CPU host it runs on the training thread. The DataLoader
itself is cheap (uint8 images in memory, 2 workers); the augmentation is about 30 ms of
CPU a batch of 32 images, the model's step about 5 ms; 2 epochs of 12 batches.

Truth: data-bound on the augmentation in the loop: it is data preparation the workers
could do (each on its own core) while the step runs, not the model's compute. The run
is 24 steps whatever diagnose does.
"""

import time

import torch
from torch.utils.data import DataLoader, TensorDataset


class RandomFlip(torch.nn.Module):
    def forward(self, x):
        flip = torch.rand(x.shape[0], 1, 1, 1) < 0.5
        return torch.where(flip, x.flip(-1), x)


class ColorJitter(torch.nn.Module):
    def forward(self, x):
        b = 1.0 + 0.2 * (torch.rand(x.shape[0], 1, 1, 1) - 0.5)
        c = 1.0 + 0.2 * (torch.rand(x.shape[0], 1, 1, 1) - 0.5)
        mean = x.mean(dim=(1, 2, 3), keepdim=True)
        return ((x - mean) * c + mean) * b


class GaussianBlur(torch.nn.Module):
    def __init__(self, size: int = 9, sigma: float = 2.0) -> None:
        super().__init__()
        r = torch.arange(size, dtype=torch.float32) - size // 2
        g = torch.exp(-(r ** 2) / (2 * sigma ** 2))
        k = torch.outer(g, g) / g.sum() ** 2
        self.register_buffer("kernel", k.expand(3, 1, size, size).clone())

    def forward(self, x):
        return torch.nn.functional.conv2d(x, self.kernel, padding=self.kernel.shape[-1] // 2,
                                          groups=3)


def calibrate(aug, x, budget_s: float) -> int:
    """How many blur passes make the augmentation about ``budget_s`` of CPU here."""
    t0 = time.process_time()
    for _ in range(3):
        aug(x)
    per = (time.process_time() - t0) / 3
    return max(1, round(budget_s / max(per, 1e-4)))


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    images = torch.randint(0, 256, (384, 3, 48, 48), dtype=torch.uint8)
    labels = torch.randint(0, 10, (384,))
    loader = DataLoader(TensorDataset(images, labels), batch_size=32, shuffle=True, num_workers=2)
    blur = GaussianBlur()
    passes = calibrate(blur, torch.rand(32, 3, 48, 48), 0.030)
    augment = torch.nn.Sequential(RandomFlip(), ColorJitter(), *[blur] * passes)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 48 * 48, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(2):
        n = 0
        for x, y in loader:
            x = x.float() / 255.0
            with torch.no_grad():
                x = augment(x)
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.005 - (time.perf_counter() - t0)))
            n += 1
        print(f"epoch {epoch}: {n} batches")
