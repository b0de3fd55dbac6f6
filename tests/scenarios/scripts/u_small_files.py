"""1280 small files (one sample each, 256 bytes) in a temporary directory, read with
open() by 2 workers; the files were just written, so reads come from the page cache and
take microseconds; 40 ms train step.

Truth: compute-bound: the loader is far ahead (reading small files is not the problem
here, whatever the folklore says).
"""

import os
import tempfile
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class Files(Dataset):
    def __init__(self, root: str) -> None:
        self.paths = sorted(os.path.join(root, n) for n in os.listdir(root))

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i):
        with open(self.paths[i], "rb") as fh:
            raw = fh.read()
        x = torch.from_numpy(np.frombuffer(raw, dtype=np.float32).copy())
        return x, x.mean()


def main() -> None:
    with tempfile.TemporaryDirectory() as root:
        rng = np.random.default_rng(0)
        for k in range(1280):
            with open(os.path.join(root, f"{k:05d}.bin"), "wb") as fh:
                fh.write(rng.standard_normal(64).astype(np.float32).tobytes())
        loader = DataLoader(Files(root), batch_size=32, shuffle=True, num_workers=2)
        model = torch.nn.Linear(64, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        n = 0
        for x, y in loader:
            t0 = time.perf_counter()
            loss = ((model(x).squeeze(1) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.040 - (time.perf_counter() - t0)))
            n += 1
        print("steps", n)


if __name__ == "__main__":
    main()
