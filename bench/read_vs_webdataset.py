"""feedline's reader vs WebDataset iterating the same tar shards (bytes only, no decode).

Question: on the very same tar files, how much faster is reading through the
binary index and coalesced windows than WebDataset's streaming tar parser?
Both sides produce every sample's field bytes in shard order, page cache warm:
WebDataset with ``wds.WebDataset(urls, shardshuffle=False)`` (no decoder), ours
with ``read_many`` in batches of 256 over a ``feedline pack``-ed dataset.
Goal >= 1.5x.

    .venv/bin/python bench/read_vs_webdataset.py [--quick] [--json PATH] [--repeat N]
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import read_common as rc
from feedline.format import pack
from feedline.io import open_dataset


def webdataset_bytes(urls: list[str]) -> tuple[int, int]:
    """The baseline: iterate every sample's raw bytes with WebDataset; (bytes, samples)."""
    import webdataset as wds

    total = count = 0
    for sample in wds.WebDataset(urls, shardshuffle=False):
        count += 1
        for key, value in sample.items():
            if not key.startswith("__"):
                total += len(value)
    return total, count


def ours_bytes(ds: Any, batch: int) -> tuple[int, int]:
    """Ours: every sample in order through read_many; (bytes, samples)."""
    return rc.read_all(ds, range(len(ds)), batch), len(ds)


def main(argv: list[str] | None = None) -> int:
    p = rc.parser(__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=256, help="samples per read_many call")
    args = p.parse_args(argv)
    n = args.samples or (2_000 if args.quick else 20_000)
    with rc.scratch(args, "read-wds") as tmp:
        sizes = rc.random_sizes(n, 1 << 10, 64 << 10, seed=4)
        rc.write_files(tmp / "src", sizes, fields=("jpg", "json"))
        pack([tmp / "src"], tmp / "ds", shard_size=64 << 20)
        urls = [str(u) for u in sorted((tmp / "ds").glob("*.tar"))]
        ds = open_dataset(tmp / "ds", io="buffered")
        payload = 2 * int(sizes.sum())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # webdataset's deprecation chatter
            res = rc.timeit_many(
                {"ours": lambda: ours_bytes(ds, args.batch), "base": lambda: webdataset_bytes(urls)}, args.repeat
            )
        for name in ("ours", "base"):
            if res[name][2] != (payload, n):
                raise SystemExit(f"{name} produced {res[name][2]}, expected {(payload, n)}")
        ours = rc.row(f"feedline read_many (batch {args.batch})", res["ours"][0], payload, n, res["ours"][1])
        base = rc.row("webdataset.WebDataset (no decode)", res["base"][0], payload, n, res["base"][1])
        import webdataset

        params = {"samples": n, "fields": "jpg + json, 1 KiB-64 KiB each (log-uniform)", "shards": len(urls),
                  "webdataset": getattr(webdataset, "__version__", "?"), "scratch_fs": rc.fs_type(tmp)}
        rc.report("read_vs_webdataset", args, params, [ours, base], [rc.compare(ours, base, 1.5)], [])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
