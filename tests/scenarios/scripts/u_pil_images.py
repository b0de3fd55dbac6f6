"""The image-folder recipe: JPEG files on disk opened with PIL, converted to RGB,
randomly cropped and flipped, turned into tensors; 1 worker, batch 16; 5 ms step.

Truth: data-bound on decode: decoding and cropping a 384 x 384 JPEG costs a few
milliseconds of CPU, so a batch takes tens of milliseconds in one worker (the files
are in the page cache: reading them is not the cost).
"""

import os
import random
import tempfile
import time

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset


class ImageFolder(Dataset):
    def __init__(self, root: str) -> None:
        self.files = sorted(os.path.join(root, f) for f in os.listdir(root))

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i):
        img = Image.open(self.files[i]).convert("RGB")
        left, top = random.randint(0, 128), random.randint(0, 128)
        img = img.crop((left, top, left + 256, top + 256)).resize((224, 224))
        if random.random() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        x = torch.from_numpy(np.asarray(img, dtype=np.float32) / 255.0).permute(2, 0, 1)
        return x, i % 10


def main() -> None:
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as root:
        rng = np.random.default_rng(0)
        for k in range(120):
            noise = rng.integers(0, 255, (384, 384, 3), dtype=np.uint8)
            Image.fromarray(noise).save(os.path.join(root, f"{k:04d}.jpg"), quality=90)
        loader = DataLoader(ImageFolder(root), batch_size=16, shuffle=True, num_workers=1)
        model = torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(4), torch.nn.Flatten(),
                                    torch.nn.Linear(48, 10))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for epoch in range(2):
            for x, y in loader:
                t0 = time.perf_counter()
                loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                time.sleep(max(0.0, 0.005 - (time.perf_counter() - t0)))
            print(f"epoch {epoch}: {len(loader)} batches")


if __name__ == "__main__":
    main()
