"""JPEG samples: feedline.Loader vs DataLoader, vs WebDataset, vs the bare decoder.

About 500x375 JPEGs (~110 KB) with a class label, batch 64, all sides decode
with simplejpeg (libjpeg-turbo). Contenders, over the same packed tar shards:

* feedline ``Loader`` (thread workers, one per core);
* ``torch.utils.data.DataLoader(num_workers=cores)`` over a map-style dataset
  reading the shards (goal: feedline >= 1.5x);
* WebDataset over the same tars through a DataLoader (goal >= 1.5x);
* the bare decoder on all cores with no loader at all, bytes already in memory
  (the limit; goal >= 0.9x).

    .venv/bin/python bench/loader_jpeg.py [--quick] [--json PATH] [--repeat N]
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from loader_common import Report, parser, scratch


def _decode(data: Any) -> Any:
    import simplejpeg

    return simplejpeg.decode_jpeg(data, colorspace="RGB")


class ShardJpegs:
    """The DataLoader baseline's map-style dataset over the packed shards."""

    def __init__(self, root: str, n: int) -> None:
        self.root, self.n, self._ds = root, n, None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        import torch

        import feedline

        if self._ds is None:
            self._ds = feedline.open_dataset(self.root)
        sample = self._ds[i]
        return torch.from_numpy(_decode(sample["jpg"])), int(bytes(sample["cls"]))


def _wds_decode(sample: dict[str, Any]) -> Any:
    import torch

    return torch.from_numpy(_decode(sample["jpg"])), int(sample["cls"])


def build(folder: Path, n: int) -> tuple[Path, int]:
    import simplejpeg

    from feedline.format import pack

    src = folder / "src"
    src.mkdir()
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:375, 0:500]
    base = ((np.sin(x / 17.0) + np.cos(y / 23.0)) * 60 + 128)[..., None]
    total = 0
    for i in range(n):
        img = np.clip(base + rng.normal(0, 14, (375, 500, 3)), 0, 255).astype(np.uint8)
        data = simplejpeg.encode_jpeg(img, quality=90)
        total += len(data)
        (src / f"{i:08d}.jpg").write_bytes(data)
        (src / f"{i:08d}.cls").write_text(str(i % 1000))
    pack([str(src)], str(folder / "ds"), shard_size=max(4 << 20, total // 8))
    return folder / "ds", total // n


def main(argv: list[str] | None = None) -> int:
    args = parser(__doc__.splitlines()[0]).parse_args(argv)
    n = args.samples or (128 if args.quick else 1024)
    cores = os.cpu_count() or 1
    import webdataset as wds
    from torch.utils.data import DataLoader

    import feedline

    with scratch(args, "loader-jpeg") as folder:
        root, mean_bytes = build(folder, n)
        report = Report("loader_jpeg", args, samples=n, batch_size=64, cores=cores,
                        mean_jpeg_bytes=mean_bytes)
        ours = feedline.Loader(str(root), batch_size=64, device=args.device, workers=cores,
                               prefetch=2, seed=0)
        dl = DataLoader(ShardJpegs(str(root), n), batch_size=64, shuffle=True, drop_last=True,
                        num_workers=cores, persistent_workers=True)
        tars = sorted(str(p) for p in root.glob("*.tar"))
        pipe = wds.WebDataset(tars, shardshuffle=False, empty_check=False).map(_wds_decode) \
            .batched(64, partial=True)
        wl = DataLoader(pipe, batch_size=None, num_workers=min(cores, len(tars)),
                        persistent_workers=True)
        blobs = [bytes(ds_s["jpg"]) for ds_s in feedline.open_dataset(root)]
        pool = ThreadPoolExecutor(cores)

        report.time("feedline Loader", lambda: sum(int(b["jpg"].shape[0]) for b in ours))
        report.time("torch DataLoader", lambda: sum(int(b[0].shape[0]) for b in dl))
        report.time("WebDataset + DataLoader", lambda: sum(int(b[0].shape[0]) for b in wl))
        report.time("bare decoder, all cores", lambda: len(list(pool.map(_decode, blobs))))
        report.compare("feedline Loader", "torch DataLoader", 1.5)
        report.compare("feedline Loader", "WebDataset + DataLoader", 1.5)
        report.compare("feedline Loader", "bare decoder, all cores", 0.9)
        ours.close()
        pool.shutdown()
    return report.finish()


if __name__ == "__main__":
    sys.exit(main())
