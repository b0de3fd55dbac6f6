"""Outside check for issue 10 (ev10): a shape no other bench uses, Loader vs DataLoader.

Speech-command clips as several arrays per sample, the way an ``.npz`` is often unpacked
into files: ``wav.u16`` (16,000 uint16 PCM frames, raw), ``mel.npy`` (float32, 40 x 101),
``pitch.npy`` (float16, 101) and ``spk.npy`` (int32 scalar, 4 bytes: an index column), with
the class in ``word.target`` (an integer label under a name nobody else here uses). Packed
with ``feedline pack``; the DataLoader reads the original files (``np.frombuffer`` /
``np.load`` / ``int``). Both are read in order and compared batch by batch, value by
value; then timed in interleaved rounds (2 workers each, batch 128), medians.

    .venv/bin/python bench/outside_ev10.py [--n 6000] [--rounds 3] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

FIELDS = ("wav.u16", "mel.npy", "pitch.npy", "spk.npy", "word.target")


def make(src: Path, n: int) -> None:
    src.mkdir(parents=True)
    for i in range(n):
        rng = np.random.default_rng(i)
        k = f"clip{i:06d}"
        (src / f"{k}.wav.u16").write_bytes(rng.integers(0, 65535, 16000, dtype=np.uint16).tobytes())
        np.save(src / f"{k}.mel.npy", rng.standard_normal((40, 101)).astype(np.float32))
        np.save(src / f"{k}.pitch.npy", rng.standard_normal(101).astype(np.float16))
        np.save(src / f"{k}.spk.npy", np.int32(i % 97))
        (src / f"{k}.word.target").write_text(str(i % 35))


class Files:
    """The map-style Dataset a user writes over the files."""

    def __init__(self, src: str) -> None:
        self.src = src
        self.keys = sorted({f.split(".", 1)[0] for f in os.listdir(src)})

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, i: int) -> dict[str, object]:
        p = os.path.join(self.src, self.keys[i])
        with open(p + ".wav.u16", "rb") as f:
            wav = np.frombuffer(f.read(), dtype="<u2")
        with open(p + ".word.target") as f:
            word = int(f.read())
        return {"wav.u16": wav, "mel.npy": np.load(p + ".mel.npy"),
                "pitch.npy": np.load(p + ".pitch.npy"), "spk.npy": np.load(p + ".spk.npy"),
                "word.target": word, "__key__": self.keys[i]}


def loaders(src: str, ds: str, which: str, shuffle: bool = False):  # type: ignore[no-untyped-def]
    import torch

    import feedline

    if which == "feedline":
        return feedline.Loader(ds, batch_size=128, workers=2, shuffle=shuffle, drop_last=False)
    return torch.utils.data.DataLoader(Files(src), batch_size=128, num_workers=2, shuffle=shuffle,
                                       persistent_workers=False)


def compare(src: str, ds: str) -> dict[str, str]:
    import feedline

    with loaders(src, ds, "feedline") as fl:
        got = list(fl)
        recipes = fl.stats["recipes"]
    want = list(loaders(src, ds, "torch"))
    assert len(got) == len(want), (len(got), len(want))
    for g, w in zip(got, want, strict=True):
        assert list(g["__key__"]) == list(w["__key__"])
        for f in FIELDS:
            a, b = g[f].numpy(), w[f].numpy()
            assert a.dtype == b.dtype or f == "wav.u16", (f, a.dtype, b.dtype)
            assert a.shape == b.shape and np.array_equal(a.astype(np.int64) if f == "wav.u16" else a,
                                                         b.astype(np.int64) if f == "wav.u16" else b), f
    del feedline
    print("wav.u16 dtypes: Loader", got[0]["wav.u16"].dtype, "DataLoader", want[0]["wav.u16"].dtype)
    return recipes


def child(src: str, ds: str, which: str) -> None:
    import warnings

    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")

    t0 = time.perf_counter()
    n = 0
    with_ctx = loaders(src, ds, which, shuffle=True)
    it = iter(with_ctx)
    first = next(it)
    n += len(first["__key__"])
    t1 = time.perf_counter()
    for b in it:
        n += len(b["__key__"])
    t2 = time.perf_counter()
    if hasattr(with_ctx, "close"):
        with_ctx.close()
    print(f"RESULT {n / (t2 - t1):.1f} {t1 - t0:.2f}")


def main() -> None:
    import warnings

    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=6000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--child", nargs=3)
    a = ap.parse_args()
    if a.child:
        child(*a.child)
        return
    root = Path(tempfile.mkdtemp(prefix="outside-ev10-", dir=a.dir))
    make(root / "src", a.n)
    subprocess.run([sys.executable, "-m", "feedline", "pack", os.fspath(root / "src"),
                    "--out", os.fspath(root / "ds")], check=True, stdout=subprocess.DEVNULL)
    import feedline

    schema = {f: (s.kind, getattr(s, "column", None)) for f, s in feedline.open_dataset(root / "ds").schema.items()}
    print("schema", schema)
    print("recipes", compare(os.fspath(root / "src"), os.fspath(root / "ds")), "- every batch equal to the DataLoader's")
    rates: dict[str, list[float]] = {"feedline": [], "torch": []}
    for r in range(a.rounds):
        for which in rates:
            out = subprocess.run([sys.executable, __file__, "--child", os.fspath(root / "src"),
                                  os.fspath(root / "ds"), which], check=True, capture_output=True, text=True).stdout
            rate = float(out.split("RESULT")[1].split()[0])
            rates[which].append(rate)
            print(f"round {r + 1} {which:9s} {out.split('RESULT')[1].strip()} (samples/s, first batch s)")
    fm, tm = statistics.median(rates["feedline"]), statistics.median(rates["torch"])
    print(f"median samples/s: Loader {fm:,.0f} [{min(rates['feedline']):,.0f}-{max(rates['feedline']):,.0f}], "
          f"DataLoader {tm:,.0f} [{min(rates['torch']):,.0f}-{max(rates['torch']):,.0f}]: {fm / tm:.2f}x")


if __name__ == "__main__":
    main()
