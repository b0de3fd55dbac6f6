"""Small samples: feedline.Loader vs torch DataLoader(num_workers=2), device cpu.

4 KiB raw float32 samples (``.f32`` fields) packed into shards, batch 256.
The baseline is the usual PyTorch set-up over the same shards: a map-style
Dataset whose ``__getitem__`` reads one sample and returns a tensor, through a
``DataLoader(num_workers=2, persistent_workers=True)``. Goal: >= 2x samples/s.

    .venv/bin/python bench/loader_small.py [--quick] [--json PATH] [--repeat N]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

from loader_common import Report, parser, scratch


class ShardSamples:
    """The baseline's map-style dataset: one sample per __getitem__ from the shards."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._ds: Any = None
        import feedline

        self._n = len(feedline.open_dataset(root))

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> Any:
        import torch

        import feedline

        if self._ds is None:  # opened lazily in each worker process
            self._ds = feedline.open_dataset(self.root)
        return torch.from_numpy(np.frombuffer(self._ds[i]["f32"], np.float32).copy())


def build(folder: Path, n: int) -> Path:
    from feedline.format import pack

    src = folder / "src"
    src.mkdir()
    rng = np.random.default_rng(0)
    for i in range(n):
        (src / f"{i:08d}.f32").write_bytes(rng.standard_normal(1024, np.float32).tobytes())
    pack([str(src)], str(folder / "ds"), shard_size=64 << 20)
    return folder / "ds"


def main(argv: list[str] | None = None) -> int:
    args = parser(__doc__.splitlines()[0]).parse_args(argv)
    n = args.samples or (2048 if args.quick else 32768)
    from torch.utils.data import DataLoader

    import feedline

    report = Report("loader_small", args, samples=n, sample_bytes=4096, batch_size=256)
    with scratch(args, "loader-small") as folder:
        root = build(folder, n)
        loader = feedline.Loader(str(root), batch_size=256, device=args.device, workers=2,
                                 prefetch=4, seed=0)
        baseline = DataLoader(ShardSamples(str(root)), batch_size=256, shuffle=True,
                              num_workers=2, persistent_workers=True, drop_last=True)

        def ours() -> int:
            n = sum(int(b["f32"].shape[0]) for b in loader)
            loader.wait_idle()  # the next pass's batches prepared ahead are timed here too
            return n

        def theirs() -> int:
            return sum(int(b.shape[0]) for b in baseline)

        report.time("feedline Loader (2 threads)", ours)
        report.time("torch DataLoader (2 processes)", theirs)
        report.compare("feedline Loader (2 threads)", "torch DataLoader (2 processes)", 2.0)
        loader.close()
    return report.finish()


if __name__ == "__main__":
    sys.exit(main())
