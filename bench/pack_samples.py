"""Benchmark: data that is not files (HDF5, Parquet, SQLite) packed with pack_samples, then loaded.

    .venv/bin/python bench/pack_samples.py [--quick] [--json PATH] [--repeat N] [--samples N]
        [--extra-path DIR]

What a user with a table or an array store does: write the source, pack it
with ``feedline.pack_samples`` (timed once), check every sample, label and
dtype that ``Loader`` gives against the source, then time one epoch with 2
workers, interleaved run by run (the host is shared: ratios, not absolutes):

* ``h5``      HDF5 (h5py): N images ``uint8[32,32,3]``, a 4 KB float32 vector,
  an int64 label; batch 256. Baseline: ``DataLoader(num_workers=2)`` over a
  Dataset reading row ``i`` with h5py.
* ``parquet`` Parquet (pyarrow): N/5 rows of a 64x64 JPEG, an int label and a
  caption; batch 64. Baseline: DataLoader over the pyarrow table, simplejpeg per row.
* ``sqlite``  the same rows in an SQLite table (stdlib, always runs). Baseline:
  DataLoader over ``SELECT ... WHERE rowid = ?``.

Contenders: ``Loader`` with thread workers and with process workers. Goal:
each >= 1.0x the DataLoader baseline. h5py and pyarrow are not dependencies:
install them apart (``pip install --target DIR h5py pyarrow``) and pass
``--extra-path DIR``; a source whose module is missing is reported as skipped.
"""

from __future__ import annotations

import importlib.util
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import simplejpeg
import torch
from torch.utils.data import DataLoader, Dataset

import feedline
import read_common as rc

GOAL = 1.0
_H5_CHUNK = 1024


def _rows(n: int, seed: int) -> dict[str, list[Any]]:
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)
    images = [np.kron(np.roll(base, i, axis=0), np.ones((8, 8, 1), np.uint8)) for i in range(n)]  # 64x64, compressible
    return {"id": [f"img.{i:07d}" for i in range(n)],
            "jpg": [simplejpeg.encode_jpeg(a, quality=90) for a in images],
            "label": rng.integers(0, 10, n).tolist(),
            "caption": [f"photo {i}" for i in range(n)]}


# -- sources: (write, samples for pack_samples, baseline Dataset) --------------------------------

class _H5Rows(Dataset):  # type: ignore[type-arg]
    def __init__(self, path: Path, n: int) -> None:
        self.path, self.n = path, n
        self.f: Any = None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        if self.f is None:  # opened in the worker; the datasets looked up once (by name per row is 10x slower)
            import h5py
            f = h5py.File(self.path)
            self.f = (f["images"], f["feat"], f["label"])
        images, feat, label = self.f
        return {"img": torch.from_numpy(images[i]), "feat": torch.from_numpy(feat[i]), "cls": int(label[i])}


class _ParquetRows(Dataset):  # type: ignore[type-arg]
    def __init__(self, path: Path, n: int) -> None:
        self.path, self.n = path, n
        self.table: Any = None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        if self.table is None:
            import pyarrow.parquet as pq
            self.table = pq.read_table(self.path)
        return {"jpg": torch.from_numpy(simplejpeg.decode_jpeg(self.table.column("jpg")[i].as_py())),
                "cls": self.table.column("label")[i].as_py()}


class _SqliteRows(Dataset):  # type: ignore[type-arg]
    def __init__(self, path: Path, n: int) -> None:
        self.path, self.n = path, n
        self.db: Any = None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        if self.db is None:
            self.db = sqlite3.connect(self.path)
        jpg, label = self.db.execute("SELECT jpg, label FROM photos WHERE rowid = ?", (i + 1,)).fetchone()
        return {"jpg": torch.from_numpy(simplejpeg.decode_jpeg(jpg)), "cls": label}


def _h5(folder: Path, n: int) -> tuple[Callable[[], Iterator[dict[str, Any]]], Dataset, dict[str, Any]]:  # type: ignore[type-arg]
    import h5py
    rng = np.random.default_rng(0)
    path = folder / "src.h5"
    with h5py.File(path, "w") as f:
        f["images"] = rng.integers(0, 255, (n, 32, 32, 3), dtype=np.uint8)
        f["feat"] = rng.standard_normal((n, 1024)).astype(np.float32)
        f["label"] = rng.integers(0, 100, n).astype(np.int64)
    with h5py.File(path) as f:
        truth = {"img.npy": f["images"][:], "feat.npy": f["feat"][:], "cls": f["label"][:]}

    def samples() -> Iterator[dict[str, Any]]:
        with h5py.File(path) as f:
            for s in range(0, n, _H5_CHUNK):  # chunks: a per-row h5py read costs more than the pack
                im, ft, lb = f["images"][s:s + _H5_CHUNK], f["feat"][s:s + _H5_CHUNK], f["label"][s:s + _H5_CHUNK]
                for j in range(len(lb)):
                    yield {"__key__": f"{s + j:07d}", "img": im[j], "feat": ft[j], "cls": int(lb[j])}
    return samples, _H5Rows(path, n), truth


def _row_samples(rows: dict[str, list[Any]]) -> Callable[[], Iterator[dict[str, Any]]]:
    def samples() -> Iterator[dict[str, Any]]:
        for k, jpg, label, caption in zip(rows["id"], rows["jpg"], rows["label"], rows["caption"], strict=True):
            yield {"__key__": k, "jpg": jpg, "cls": label, "caption": caption}
    return samples


def _parquet(folder: Path, n: int) -> tuple[Callable[[], Iterator[dict[str, Any]]], Dataset, dict[str, Any]]:  # type: ignore[type-arg]
    import pyarrow as pa
    import pyarrow.parquet as pq
    rows = _rows(n, 1)
    path = folder / "src.parquet"
    pq.write_table(pa.table(rows), path)

    def samples() -> Iterator[dict[str, Any]]:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=1024):
            for r in batch.to_pylist():
                yield {"__key__": r["id"], "jpg": r["jpg"], "cls": r["label"], "caption": r["caption"]}
    return samples, _ParquetRows(path, n), rows


def _sqlite(folder: Path, n: int) -> tuple[Callable[[], Iterator[dict[str, Any]]], Dataset, dict[str, Any]]:  # type: ignore[type-arg]
    rows = _rows(n, 2)
    path = folder / "src.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE photos (id TEXT, jpg BLOB, label INTEGER, caption TEXT)")
        db.executemany("INSERT INTO photos VALUES (?, ?, ?, ?)", zip(*rows.values(), strict=True))

    def samples() -> Iterator[dict[str, Any]]:
        with sqlite3.connect(path) as db:
            for k, jpg, label, caption in db.execute("SELECT id, jpg, label, caption FROM photos ORDER BY rowid"):
                yield {"__key__": k, "jpg": jpg, "cls": label, "caption": caption}
    return samples, _SqliteRows(path, n), rows


SOURCES: dict[str, tuple[str | None, Callable[..., Any], int, int]] = {
    # name: (module needed, builder, share of --samples (divisor), batch size)
    "h5": ("h5py", _h5, 1, 256),
    "parquet": ("pyarrow", _parquet, 5, 64),
    "sqlite": (None, _sqlite, 5, 64),
}


def _check(name: str, out: Path, truth: dict[str, Any], batch: int) -> int:
    """Every sample that Loader gives equals the source (pixels, labels, dtypes); the count."""
    seen = 0
    pos = {k: i for i, k in enumerate(truth["id"])} if name != "h5" else {}
    for b in feedline.Loader(str(out), batch_size=batch, workers=2, drop_last=False, seed=1):
        keys = b["__key__"]
        if name == "h5":
            idx = np.array([int(k) for k in keys])
            assert b["img.npy"].dtype == torch.uint8 and b["feat.npy"].dtype == torch.float32
            assert b["cls"].dtype == torch.int64
            for field in ("img.npy", "feat.npy", "cls"):
                assert np.array_equal(b[field].numpy(), truth[field][idx]), field
        else:
            idx = [pos[k] for k in keys]
            want = np.stack([simplejpeg.decode_jpeg(truth["jpg"][i]) for i in idx])
            assert np.array_equal(b["jpg"].numpy(), want), "jpg pixels"
            assert b["cls"].dtype == torch.int64 and b["cls"].tolist() == [truth["label"][i] for i in idx]
            assert [c if isinstance(c, str) else bytes(c).decode() for c in b["caption.txt"]] == [truth["caption"][i] for i in idx]
        seen += len(keys)
    return seen


def _epoch(make: Callable[[], Any]) -> Callable[[], int]:
    return lambda: sum(len(b["cls"]) for b in make())


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = rc.parser(__doc__.splitlines()[0])
    p.add_argument("--extra-path", action="append", default=[],
                   help="a folder with h5py/pyarrow installed apart (pip install --target DIR)")
    p.add_argument("--sources", default="h5,parquet,sqlite", help="comma-separated: h5, parquet, sqlite")
    p.set_defaults(repeat=3)
    args = p.parse_args(argv)
    for extra in args.extra_path:
        sys.path.append(extra)  # after .venv: its numpy and torch win
    n = args.samples or (2000 if args.quick else 20000)
    rows, comparisons, skipped = [], [], []
    params: dict[str, Any] = {"samples_h5": n, "workers": 2}
    with rc.scratch(args, "pack-samples") as tmp:
        for name in args.sources.split(","):
            module, build, share, batch = SOURCES[name]
            if module is not None and importlib.util.find_spec(module) is None:
                skipped.append({"name": name, "reason": f"{module} is not installed (pip install --target DIR "
                                f"{module}, then --extra-path DIR)"})
                continue
            count = max(n // share, batch)
            folder = tmp / name
            folder.mkdir()
            samples, baseline, truth = build(folder, count)
            out = folder / "ds"
            t0 = time.perf_counter()
            manifest = feedline.pack_samples(samples(), out, shard_size="64MiB", durable=False)
            pack_s = time.perf_counter() - t0
            nbytes = sum(s.size for s in manifest.shards)
            params[f"pack_{name}_s"] = round(pack_s, 3)
            params[f"pack_{name}_samples_per_s"] = round(count / pack_s)
            checked = _check(name, out, truth, batch)
            assert checked == count, (checked, count)
            params[f"checked_{name}"] = checked
            fns = {
                f"{name} Loader(threads)": _epoch(lambda o=out, b=batch: feedline.Loader(str(o), batch_size=b, workers=2)),
                f"{name} Loader(processes)": _epoch(lambda o=out, b=batch: feedline.Loader(
                    str(o), batch_size=b, workers=2, worker_type="process")),
                f"{name} DataLoader(num_workers=2)": _epoch(lambda d=baseline, b=batch: DataLoader(
                    d, batch_size=b, num_workers=2, shuffle=True, drop_last=True)),
            }
            timed = rc.timeit_many(fns, args.repeat, warmup=0)
            mine = [rc.row(k, sec, nbytes, res, times) for k, (sec, times, res) in timed.items()]
            rows += mine
            comparisons += [rc.compare(r, mine[-1], GOAL) for r in mine[:2]]
    return rc.report("pack_samples", args, params, rows, comparisons, skipped)


if __name__ == "__main__":
    main()
