"""The seed's "before" code: a plain PyTorch training script, written the usual way.

Small JPEG images decoded with PIL and normalised per sample, a small CNN, and
``DataLoader(dataset, batch_size=64, num_workers=0, pin_memory=False)``.
"""

import io

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

torch.set_num_threads(1)


class JpegImages(Dataset):
    def __init__(self, n: int) -> None:
        rng = np.random.default_rng(0)
        self.blobs = []
        for i in range(32):
            img = Image.fromarray(rng.integers(0, 255, (96, 96, 3), dtype=np.uint8))
            buf = io.BytesIO()
            img.save(buf, format="JPEG", quality=90)
            self.blobs.append((buf.getvalue(), i % 10))
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        blob, label = self.blobs[i % len(self.blobs)]
        img = Image.open(io.BytesIO(blob)).convert("RGB").resize((64, 64))
        x = torch.from_numpy(np.asarray(img, dtype=np.float32) / 255.0).permute(2, 0, 1)
        x = (x - 0.5) / 0.25
        if i % 2:
            x = torch.flip(x, dims=[2])
        return x, label


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dataset = JpegImages(64 * 200)
    loader = DataLoader(dataset, batch_size=64, num_workers=0, pin_memory=False)
    model = torch.nn.Sequential(
        torch.nn.AvgPool2d(4), torch.nn.Flatten(), torch.nn.Linear(3 * 16 * 16, 10)
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(3):
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        print("epoch", epoch, float(loss))


if __name__ == "__main__":
    main()
