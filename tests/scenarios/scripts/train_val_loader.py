"""Two feedline.Loaders: training (compute-bound: in-memory samples, 2 thread workers,
30 ms step) and validation every 10 steps over packed JPEGs decoded after delivery
(``decode_on=CpuJpegDecoder()``: 3 batches of 12 320x240 photos, about 20 ms of decode per
batch on the consumer's thread, against a 4 ms evaluation step).

Truth: the training loader is compute-bound. The validation loader is its own line in
every output, waiting for data most of its time, and what binds it is the decode after
delivery (``device_decode``), which its workers cannot share: more workers would not
help; decoding in the workers (``decode_on="cpu"``) would. ``python train_val_loader.py cpu``
applies that advice.
"""

import os
import sys
import tempfile
import time

import numpy as np
import simplejpeg
from _common import Step

import feedline
from feedline.decode.jpeg_batch import CpuJpegDecoder
from feedline.format import pack


class Samples:
    def __len__(self) -> int:
        return 4096

    def __getitem__(self, i: int) -> dict:
        return {"x": np.full((8,), float(i % 7), dtype=np.float32)}


def photos(root: str, n: int) -> str:
    """``n`` 320x240 JPEGs with a class label, packed into shards under ``root``."""
    src = os.path.join(root, "val")
    os.makedirs(src)
    rng = np.random.default_rng(0)
    for i in range(n):
        img = (rng.integers(0, 255, (240, 320, 3), dtype=np.uint8) // 32 * 32).astype(np.uint8)
        with open(os.path.join(src, f"v{i:03d}.jpg"), "wb") as fh:
            fh.write(simplejpeg.encode_jpeg(img, quality=90))
        with open(os.path.join(src, f"v{i:03d}.cls"), "w") as fh:
            fh.write(str(i % 10))
    pack([src], os.path.join(root, "shards"), durable=False)
    return os.path.join(root, "shards")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        shards = photos(tmp, 36)
        step = Step(8, 0.030)
        train = feedline.Loader(Samples(), batch_size=8, workers=2, shuffle=False)
        where = "cpu" if sys.argv[1:] == ["cpu"] else CpuJpegDecoder()
        val = feedline.Loader(shards, batch_size=12, workers=2, shuffle=False, decode_on=where)
        for _epoch in range(100):
            for k, batch in enumerate(train):
                x = batch["x"]
                step(x, x.sum(1) / 8)
                if k % 10 == 9:
                    for vb in val:
                        assert len(vb["jpg"]) == 12
                        time.sleep(0.004)
        sys.exit("never reached: diagnose --steps ends the run")
