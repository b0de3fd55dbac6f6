"""What does checksum verification cost on the read path? ``verify=True`` vs the default.

Question (issue 13 item 10): should ``open_dataset(..., verify=)`` default to on?
Every sample of a packed dataset is read through ``read_many`` twice per round,
once with ``verify=False`` (the baseline: the default) and once with
``verify=True`` (xxh3_64 of every field checked against the index), interleaved
run by run, page cache warm, for two sample mixes: large fields (64 KiB - 1 MiB,
images) and small ones (1 - 16 KiB, labels and tokens). A third row hashes the
same payload with xxh3 alone: the floor of verification's cost.

Reported per mix: medians, the ratio verify-off time / verify-on time (1.0 = free),
and the extra seconds per GB of payload that verification adds.

    .venv/bin/python bench/read_verify.py [--quick] [--json PATH] [--repeat N]
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import read_common as rc
from feedline.format import pack
from feedline.io import open_dataset

MIXES = {"large": (64 << 10, 1 << 20), "small": (1 << 10, 16 << 10)}


def hash_only(ds: Any, order: np.ndarray, batch: int) -> int:
    """Read without verification, then xxh3 every field: the hashing alone, in the same
    memory the reader returns."""
    import xxhash

    total = 0
    for lo in range(0, len(order), batch):
        for sample in ds.read_many(order[lo:lo + batch]):
            for key, value in sample.items():
                if key != "__key__":
                    xxhash.xxh3_64_intdigest(value)
                    total += value.nbytes
    return total


def main(argv: list[str] | None = None) -> int:
    p = rc.parser(__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=64, help="samples per read_many call")
    args = p.parse_args(argv)
    budget = (24 << 20) if args.quick else (400 << 20)  # payload bytes per mix
    rows: list[dict[str, Any]] = []
    comps: list[dict[str, Any]] = []
    params: dict[str, Any] = {"batch": args.batch}
    with rc.scratch(args, "read-verify") as tmp:
        for mix, (lo, hi) in MIXES.items():
            n = args.samples or int(budget / ((lo + hi) / 2))
            sizes = rc.random_sizes(n, lo, hi, seed=3)
            rc.write_files(tmp / f"src-{mix}", sizes)
            pack([tmp / f"src-{mix}"], tmp / mix, shard_size=256 << 20)
            shutil.rmtree(tmp / f"src-{mix}")
            payload = int(sizes.sum())
            order = np.arange(n)
            off = open_dataset(tmp / mix, io="buffered")
            on = open_dataset(tmp / mix, io="buffered", verify=True)
            res = rc.timeit_many({
                "off": lambda off=off, order=order: rc.read_all(off, order, args.batch),
                "on": lambda on=on, order=order: rc.read_all(on, order, args.batch),
                "hash": lambda off=off, order=order: hash_only(off, order, args.batch),
            }, args.repeat)
            for name in ("off", "on", "hash"):
                if res[name][2] != payload:
                    raise SystemExit(f"{mix}/{name} read {res[name][2]} bytes, expected {payload}")
            base = rc.row(f"{mix}: verify=False (default)", res["off"][0], payload, n,
                          res["off"][1])
            ours = rc.row(f"{mix}: verify=True", res["on"][0], payload, n, res["on"][1])
            floor = rc.row(f"{mix}: read + xxh3 by hand", res["hash"][0], payload, n,
                           res["hash"][1])
            rows += [base, ours, floor]
            comp = rc.compare(ours, base, 0.5)
            extra = (res["on"][0] - res["off"][0]) / (payload / 1e9)
            comp["note"] = (f"verification adds {extra:.3f} s per GB of payload "
                            f"({payload / n / 1e3:.0f} kB mean sample)")
            comp["extra_s_per_GB"] = extra
            comps.append(comp)
            params[f"{mix}_samples"] = n
            params[f"{mix}_sample_bytes"] = f"{lo}-{hi} (log-uniform)"
            params[f"{mix}_payload_bytes"] = payload
        params["scratch_fs"] = rc.fs_type(tmp)
        rc.report("read_verify", args, params, rows, comps, [])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
