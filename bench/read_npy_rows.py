"""Batches of .npy samples: read_fields_into (+ gather_labels) vs read_many and a per-sample decode.

Question: what does the field schema buy on a batch of small ``.npy`` arrays?
Every contender fills the same batch (256 shuffled samples of a 4 KB float32
``.npy`` and an integer ``.cls`` label) from the same packed dataset, page
cache warm, one thread:

- ours: ``ds.read_fields_into(batch, {"x.npy": rows})`` (one ``pread`` per
  sample straight into its row, the header offset known from the index) and
  ``ds.gather_labels(batch, {"cls": labels})`` (a numpy gather of the index's
  label column);
- baseline ``np.load``: ``ds.read_many(batch)`` then ``np.load`` of each
  sample's bytes, ``np.stack``, ``int()`` of each label (a map-style Dataset
  written the way tutorials write it);
- baseline feedline decode: ``ds.read_many(batch)`` then feedline's own
  zero-copy ``.npy`` and ``.cls`` codecs per sample and ``np.stack`` (the
  loader's per-sample path).

Timed over one epoch of batches, contenders interleaved run by run, medians of
``--repeat`` runs; ratio = baseline time / our time.

    .venv/bin/python bench/read_npy_rows.py [--quick] [--json PATH] [--repeat N]
"""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import read_common as rc
from feedline.decode.codecs import Limits, decode_cls, decode_npy
from feedline.format import pack
from feedline.io import open_dataset

FIELD, LABEL = "x.npy", "cls"


def write_source(folder: Path, n: int, floats: int) -> None:
    """``n`` samples ``{i:08d}.x.npy`` (float32, ``floats`` values) and ``{i:08d}.cls``."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(n):
        buf = io.BytesIO()
        np.save(buf, rng.standard_normal(floats).astype(np.float32), allow_pickle=False)
        (folder / f"{i:08d}.{FIELD}").write_bytes(buf.getvalue())
        (folder / f"{i:08d}.{LABEL}").write_bytes(b"%d\n" % (i % 1000))


def batches(order: np.ndarray, size: int) -> list[np.ndarray]:
    return [order[lo : lo + size] for lo in range(0, len(order), size)]


def ours(ds: Any, parts: list[np.ndarray], floats: int) -> tuple[float, int]:
    check, total = 0.0, 0
    for b in parts:
        rows = np.empty((len(b), floats), np.float32)
        labels = np.empty(len(b), np.int64)
        ds.read_fields_into(b, {FIELD: rows})
        ds.gather_labels(b, {LABEL: labels})
        check += float(rows[:, 0].sum()) + float(labels.sum())
        total += len(b)
    return check, total


def with_np_load(ds: Any, parts: list[np.ndarray], floats: int) -> tuple[float, int]:
    check, total = 0.0, 0
    for b in parts:
        samples = ds.read_many(b)
        rows = np.stack([np.load(io.BytesIO(bytes(s[FIELD])), allow_pickle=False) for s in samples])
        labels = np.array([int(bytes(s[LABEL])) for s in samples], np.int64)
        check += float(rows[:, 0].sum()) + float(labels.sum())
        total += len(b)
    return check, total


def with_feedline_codecs(ds: Any, parts: list[np.ndarray], floats: int) -> tuple[float, int]:
    check, total, limits = 0.0, 0, Limits()
    for b in parts:
        samples = ds.read_many(b)
        rows = np.stack([decode_npy(s[FIELD], limits) for s in samples])
        labels = np.array([decode_cls(s[LABEL], limits) for s in samples], np.int64)
        check += float(rows[:, 0].sum()) + float(labels.sum())
        total += len(b)
    return check, total


def main(argv: list[str] | None = None) -> int:
    p = rc.parser(__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=256, help="samples per batch")
    p.add_argument("--floats", type=int, default=1024, help="float32 values per .npy (1024: 4 KB)")
    args = p.parse_args(argv)
    n = args.samples or (2048 if args.quick else 20_000)
    with rc.scratch(args, "read-npy") as tmp:
        write_source(tmp / "src", n, args.floats)
        pack([tmp / "src"], tmp / "ds", shard_size=64 << 20, workers=2)
        ds = open_dataset(tmp / "ds", io="buffered")
        schema = ds.schema
        if schema[FIELD].kind != "npy" or schema[LABEL].kind != "label":
            raise SystemExit(f"unexpected schema {dict(schema)}")
        parts = batches(np.random.default_rng(1).permutation(n), args.batch)
        fns = {
            "ours": lambda: ours(ds, parts, args.floats),
            "np.load": lambda: with_np_load(ds, parts, args.floats),
            "codecs": lambda: with_feedline_codecs(ds, parts, args.floats),
        }
        res = rc.timeit_many(fns, args.repeat)
        want = res["np.load"][2]
        for name in fns:
            if res[name][2][1] != n or not np.isclose(res[name][2][0], want[0]):
                raise SystemExit(f"{name} filled different batches ({res[name][2]} vs {want})")
        payload = n * (args.floats * 4 + 8)
        names = {
            "ours": "read_fields_into + gather_labels",
            "np.load": "read_many + np.load/int per sample + stack",
            "codecs": "read_many + feedline codecs per sample + stack",
        }
        rows = {k: rc.row(names[k], res[k][0], payload, n, res[k][1]) for k in fns}
        comps = [rc.compare(rows["ours"], rows["np.load"], 2.0), rc.compare(rows["ours"], rows["codecs"], 1.5)]
        params = {"samples": n, "batch": args.batch, "npy_bytes": args.floats * 4, "file_system": rc.fs_type(tmp),
                  "note": "one thread; page cache warm; the machine may be shared (interleaved runs, medians)"}
        rc.report("read_npy_rows", args, params, list(rows.values()), comps, [])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
