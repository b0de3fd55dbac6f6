"""Many small files: reading every sample from shards vs opening the files one by one.

Question: what does packing buy over the file-per-sample layout that
``Dataset.__getitem__`` code usually has? 50,000 files of 1-64 KB (log-uniform;
``--quick``: 5,000), page cache warm for both. Both sides read every sample in
the same order, once in key order and once shuffled; ours through ``read_many`` in batches of 256 from a
packed dataset (``io="buffered"``), the baseline with ``open(path, "rb").read()``
per file. Goal >= 3x here; the gap only grows on network file systems.

    .venv/bin/python bench/read_small_files.py [--quick] [--json PATH] [--repeat N]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import read_common as rc
from feedline.format import pack
from feedline.io import open_dataset


def read_files(paths: list[Path], order: np.ndarray) -> int:
    """The baseline: one open + read + close per sample."""
    total = 0
    for i in order.tolist():
        with open(paths[i], "rb") as f:
            total += len(f.read())
    return total


def main(argv: list[str] | None = None) -> int:
    p = rc.parser(__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=256, help="samples per read_many call")
    args = p.parse_args(argv)
    n = args.samples or (5_000 if args.quick else 50_000)
    with rc.scratch(args, "read-small") as tmp:
        sizes = rc.random_sizes(n, 1 << 10, 64 << 10, seed=2)
        paths = rc.write_files(tmp / "files", sizes)
        pack([tmp / "files"], tmp / "ds", shard_size=256 << 20)
        ds = open_dataset(tmp / "ds", io="buffered")
        keys = ds.keys()
        key_of = {k: i for i, k in enumerate(keys)}  # file i holds sample key f"{i:08d}"
        payload = int(sizes.sum())
        file_order = np.array([int(k) for k in keys])  # the file behind each sample
        rows, comps = [], []
        for label, perm in (("in order", np.arange(n)), ("shuffled", np.random.default_rng(3).permutation(n))):
            sample_order = np.array([key_of[f"{i:08d}"] for i in perm.tolist()])
            assert (file_order[sample_order] == perm).all()
            res = rc.timeit_many(
                {"ours": lambda o=sample_order: rc.read_all(ds, o, args.batch),
                 "base": lambda p=perm: read_files(paths, p)},
                args.repeat,
            )
            for name in ("ours", "base"):
                if res[name][2] != payload:
                    raise SystemExit(f"{name} read {res[name][2]} bytes, expected {payload}")
            ours = rc.row(f"feedline read_many, {label} (batch {args.batch})", res["ours"][0], payload, n, res["ours"][1])
            base = rc.row(f"open+read per file, {label}", res["base"][0], payload, n, res["base"][1])
            rows += [ours, base]
            comps.append(rc.compare(ours, base, 3.0))
        params = {"files": n, "file_bytes": "1 KiB-64 KiB (log-uniform)", "payload_bytes": payload,
                  "shards": len(list((tmp / "ds").glob("*.tar"))), "scratch_fs": rc.fs_type(tmp)}
        rc.report("read_small_files", args, params, rows, comps, [])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
