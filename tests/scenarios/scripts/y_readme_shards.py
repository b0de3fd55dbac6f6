"""The README's path, as a new user copies it: an ImageFolder of JPEGs (3 classes x 64
photos of 48 x 48), packed once with ``python -m feedline pack --labels from-folder``
(a subprocess), then ``feedline.Loader("data/train", transform=vision.ImageTransform(...),
workers=2)`` with ``set_epoch`` per epoch; batch 16 (a few milliseconds of decode and
resize per batch) against a 60 ms step; 2 epochs of 12 batches.

Truth: compute-bound (the packing before the loop is no stall of it).
"""

import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from PIL import Image

import feedline
from feedline import vision

if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        rng = np.random.default_rng(0)
        for c, name in enumerate(["cats", "dogs", "owls"]):
            os.makedirs(os.path.join(tmp, "train", name))
            for k in range(64):
                img = (rng.random((48, 48, 3)) * 60 + 60 * c).astype(np.uint8)
                Image.fromarray(img).save(os.path.join(tmp, "train", name, f"{k:03d}.jpg"))
        subprocess.run([sys.executable, "-m", "feedline", "pack", os.path.join(tmp, "train"),
                        "--out", os.path.join(tmp, "data", "train"), "--labels", "from-folder"],
                       check=True, stdout=subprocess.DEVNULL)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        loader = feedline.Loader(os.path.join(tmp, "data", "train"), batch_size=16, device=device,
                                 workers=2, seed=0,
                                 transform=vision.ImageTransform(("jpg", "png"), size=32, out="image"))
        net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, 3)).to(device)
        opt = torch.optim.SGD(net.parameters(), lr=0.01)
        for epoch in range(2):
            loader.set_epoch(epoch)
            n = 0
            for batch in loader:
                t0 = time.perf_counter()
                loss = torch.nn.functional.cross_entropy(net(batch["image"]), batch["cls"])
                opt.zero_grad()
                loss.backward()
                opt.step()
                time.sleep(max(0.0, 0.060 - (time.perf_counter() - t0)))
                n += 1
            print(f"epoch {epoch}: {n} batches")
