"""Where a JPEG's time goes inside the loader, against the bare decode (issue 10's W1).

One thread, so neither the GIL nor the scheduler enters: for every part of 16 images of
the loader's own epoch order, each variant below runs once, in a random order per part,
and its CPU time (``time.thread_time``) is summed. Other load on the host then shifts
every variant alike, which wall rates at load 10-80 do not (see docs/benchmarks.md, "W1:
where the loader's extra 7-12 % per image goes").

Variants: the bare decode of the image's ``bytes`` into one reused array (the ceiling's
loop, ``bench/peers.py``), the same into the rows of the loader's slots, ``read_fields``
alone, a raw ``os.preadv`` of the same members alone, the label gather alone, and the
loader's part (``fill_rows``: read, decode into rows, gather).

    python bench/w1_gap.py --data DIR      # a packed W1 (bench/peers.py --keep --dir ...)
    python bench/w1_gap.py --quick         # 320 small JPEGs made here (a smoke test)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

PART = 16


def make_quick(root: Path, n: int = 320, size: int = 64) -> Path:
    """``n`` JPEGs of ``size`` x ``size`` with a ``.cls`` each, packed under ``root/ds``."""
    import simplejpeg

    from feedline.format import pack

    src = root / "src"
    src.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(n):
        img = rng.integers(0, 255, (size, size, 3), dtype=np.uint8)
        (src / f"{i:08d}.jpg").write_bytes(simplejpeg.encode_jpeg(img, quality=90))
        (src / f"{i:08d}.cls").write_text(str(i % 10))
    pack(src, root / "ds")
    return root / "ds"


def measure(ds_dir: Path, rounds: int) -> dict[str, Any]:
    """Median CPU microseconds per image of each variant (see the module)."""
    import simplejpeg

    import feedline
    from feedline.pipeline.plan import fill_rows

    decode = simplejpeg.decode_jpeg
    loader = feedline.Loader(str(ds_dir), batch_size=64, workers=2, worker_type="thread",
                             drop_last=False, seed=0)
    try:
        for _ in loader:  # the plan (decode-rows + gather) and the slot layout
            pass
        loader.wait_idle()
        rt = loader._rt
        order = loader._plan(0)
        jobs = [loader._job(order, b, 0) for b in range(order.num_batches)]
        source, slots = rt.ctx.source, [rt.pool.acquire() for _ in range(4)]
        parts = [(k, j, lo, min(lo + PART, len(j.indices))) for k, j in enumerate(jobs)
                 for lo in range(0, len(j.indices), PART)]
        blob: dict[int, bytes] = {}
        for _, j, lo, hi in parts:
            _, views = source.read_fields(j.indices[lo:hi], ["jpg"])
            blob.update({int(i): bytes(v) for i, v in zip(j.indices[lo:hi], views["jpg"], strict=True)})
        shape = slots[0].arrays[("jpg",)].shape[1:]
        frame = np.empty(shape, np.uint8)
        opened = source.dataset._state()
        spans = opened.catalog.member_spans("jpg")
        at, _ = opened.catalog.locate(np.arange(len(blob)))
        fds = [os.open(s.entry.path, os.O_RDONLY) for s in opened.states]
        scratch = memoryview(bytearray(PART * int(spans[:, 1].max())))

        def bare(k: int, j: Any, lo: int, hi: int) -> None:
            for i in j.indices[lo:hi]:
                decode(blob[i], colorspace="RGB", buffer=frame)

        def rows(k: int, j: Any, lo: int, hi: int) -> None:
            out = slots[k % 4].arrays[("jpg",)]
            for r, i in enumerate(j.indices[lo:hi], lo):
                decode(blob[i], colorspace="RGB", buffer=out[r])

        def read(k: int, j: Any, lo: int, hi: int) -> None:
            source.read_fields(j.indices[lo:hi], ["jpg"])

        def preadv(k: int, j: Any, lo: int, hi: int) -> None:
            used = 0
            for i in j.indices[lo:hi]:
                offset, size = spans[i].tolist()
                os.preadv(fds[at[i]], [scratch[used : used + size]], offset)
                used += size

        def gather(k: int, j: Any, lo: int, hi: int) -> None:
            source.gather(j.indices[lo:hi], {"cls": slots[k % 4].arrays[("cls",)][lo:hi]})

        def part(k: int, j: Any, lo: int, hi: int) -> None:
            fill_rows(rt.ctx, rt.plan, j, lo, hi, "w", None, slots[k % 4].arrays)

        variants = {"bare decode -> one reused array": bare, "bare decode -> slot rows": rows,
                    "read_fields alone": read, "raw preadv alone": preadv,
                    "label gather alone": gather, "loader part (fill_rows)": part}
        per: dict[str, list[float]] = {name: [] for name in variants}
        rng = random.Random(0)
        for _ in range(rounds):
            spent = dict.fromkeys(variants, 0.0)
            for p in parts:
                names = list(variants)
                rng.shuffle(names)
                for name in names:
                    c0 = time.thread_time()
                    variants[name](*p)
                    spent[name] += time.thread_time() - c0
            for name in variants:
                per[name].append(spent[name] / len(blob) * 1e6)
        for fd in fds:
            os.close(fd)
        for slot in slots:
            rt.pool.release(slot)
    finally:
        loader.close()
    base = statistics.median(per["bare decode -> one reused array"])
    return {"images": len(blob), "rounds": rounds, "load_avg_1min": os.getloadavg()[0],
            "us_per_image": {name: {"median": statistics.median(v), "min": min(v), "max": max(v),
                                    "of_bare": statistics.median(v) / base}
                             for name, v in per.items()}}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", type=Path, help="a packed W1 dataset (JPEG + .cls)")
    p.add_argument("--quick", action="store_true", help="320 small JPEGs made here")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", type=Path, help="also write the results as JSON here")
    args = p.parse_args()
    if (args.data is None) == (not args.quick):
        p.error("give --data DIR or --quick")
    with tempfile.TemporaryDirectory() as tmp:
        ds = make_quick(Path(tmp)) if args.quick else args.data
        doc = measure(ds, max(1, args.rounds))
    print(f"{doc['images']} images, {doc['rounds']} rounds, load {doc['load_avg_1min']:.1f}; "
          "CPU per image, one thread, variants interleaved per 16-image part")
    for name, r in doc["us_per_image"].items():
        print(f"  {name:34} {r['median']:8.1f} us  [{r['min']:.1f}-{r['max']:.1f}]  "
              f"x{r['of_bare']:.3f} of the bare decode")
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
