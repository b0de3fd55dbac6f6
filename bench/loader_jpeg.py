"""JPEG samples: feedline.Loader vs DataLoader, vs WebDataset, vs the bare decoder.

About 500x375 JPEGs (~110 KB) with a class label, batch 64, all sides decode
with simplejpeg (libjpeg-turbo). Contenders, over the same packed tar shards:

* feedline ``Loader`` (thread workers, one per core);
* ``torch.utils.data.DataLoader(num_workers=cores)`` over a map-style dataset
  reading the shards (goal: feedline >= 1.5x);
* WebDataset over the same tars through a DataLoader (goal >= 1.5x);
* the bare decoder on all cores with no loader at all, bytes already in memory
  (the limit; goal >= 0.9x);
* for information, the bare decoder on one core: all cores / one core is the
  parallel speed-up this run actually got (about 1 on a shared, loaded host),
  and the bare decoder into one reused array on one core: cores x that rate is
  the ceiling of any loader with this decoder (printed with the ratio it allows
  against each baseline).

Every row also shows the CPU seconds per sample spent in this process (all its
threads; not the DataLoader's worker processes), and the compressed-bytes plumbing
(``decode_on=CpuJpegDecoder``) is compared with decoding in the workers on that too
(goal: <= 1.05x): a shared host disturbs CPU per sample far less than samples/s.

With ``--decode-size HxW`` it answers another question instead: what decoding
and resizing in the workers (``Loader(decode_size=...)`` today) gains over the
decode after delivery that ``decode_size`` ran before (``CpuJpegDecoder`` on the
consumer's thread, one thread: the baseline), and over the same after delivery
with one thread per core (for information).

The machine is shared, so contenders are interleaved: each is warmed up once,
then every round runs each contender once (in a rotating order). The ratio
reported against each baseline is the median of the per-round ratios (the
ratio of the medians is printed next to it): a burst of load from elsewhere
then hits one round of every contender, not all runs of one.

    .venv/bin/python bench/loader_jpeg.py [--quick] [--json PATH] [--repeat N] [--decode-size 224x224]
"""

from __future__ import annotations

import os
import resource
import statistics
import sys
import time
from collections.abc import Callable
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


OURS = "feedline Loader"
COMPRESSED = "feedline Loader, decode_on=CpuJpegDecoder (info)"
NO_AHEAD = "feedline Loader, decode_on=CpuJpegDecoder, no decode-ahead (info)"
ONE_CORE = "bare decoder, one core (info)"
ONE_CORE_REUSED = "bare decoder into one reused array, one core (info)"
GOALS = (("torch DataLoader", 1.5), ("WebDataset + DataLoader", 1.5),
         ("bare decoder, all cores", 0.9))


def _cpu_s() -> float:
    """CPU seconds of this whole process so far (every thread; not child processes)."""
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def interleaved(report: Report, contenders: dict[str, Callable[[], int]], rounds: int) -> None:
    """Warm up each contender, then time ``rounds`` rounds of one run of each (round-robin,
    the order rotating every round) and add one row per contender (median, all runs).

    Each run's CPU seconds in this process are kept too (``cpu_runs_s``): on a shared
    host they move far less than wall time. They count the thread loaders and the bare
    decoders whole, but not the DataLoader's worker processes."""
    names = list(contenders)
    for name in names:
        contenders[name]()
    runs: dict[str, list[float]] = {n: [] for n in names}
    cpus: dict[str, list[float]] = {n: [] for n in names}
    counts: dict[str, int] = {}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            t0, c0 = time.perf_counter(), _cpu_s()
            counts[name] = contenders[name]()
            runs[name].append(time.perf_counter() - t0)
            cpus[name].append(_cpu_s() - c0)
    for name in names:
        med = statistics.median(runs[name])
        rate = counts[name] / med if med > 0 else float("inf")
        cpu_us = statistics.median(cpus[name]) / max(1, counts[name]) * 1e6
        report.add({"name": name, "median_s": med, "runs_s": runs[name], "cpu_runs_s": cpus[name],
                    "cpu_per_sample_us": cpu_us, "samples": counts[name], "samples_per_s": rate})
        print(f"{name:<40} {med * 1e3:9.1f} ms  {rate:12.0f} samples/s  {cpu_us:7.0f} us CPU/sample here")


def compare_per_round(report: Report) -> None:
    """Ours vs each baseline, round by round (see :meth:`Report.per_round`)."""
    for baseline, goal in GOALS:
        report.per_round(OURS, baseline, goal)


def _decode_into(data: Any, out: Any) -> Any:
    import simplejpeg

    return simplejpeg.decode_jpeg(data, colorspace="RGB", buffer=out)


def ours_pass(loader: Any) -> int:
    """One pass of a Loader, then a wait for the next pass's batches it prepares ahead:
    that work is timed here, not left to run while the next contender is timed. ``len``
    counts a dense batch and the list that ``decode_on`` delivers alike."""
    n = sum(len(b["jpg"]) for b in loader)
    loader.wait_idle()
    return n


def plumbing_cost(report: Report) -> None:
    """The compressed-bytes plumbing against decoding in the workers: goal < 5% cost, in
    samples/s and in CPU per sample (median of the per-round ratios); and, for
    information, against the same plumbing without decode-ahead."""
    report.per_round(COMPRESSED, NO_AHEAD, 0.0)  # for information: what decode-ahead changes
    report.per_round(COMPRESSED, OURS, 0.95)
    rows = {r["name"]: r for r in report.doc["rows"]}
    a, b = rows[COMPRESSED], rows[OURS]
    ratios = [(ca / a["samples"]) / (cb / b["samples"]) if cb > 0 else float("inf")
              for ca, cb in zip(a["cpu_runs_s"], b["cpu_runs_s"], strict=True)]
    ratio = statistics.median(ratios)
    report.doc["plumbing_cpu"] = {"ratio": ratio, "goal": 1.05, "meets_goal": ratio <= 1.05,
                                  "per_round": ratios}
    print(f"  CPU per sample, {COMPRESSED} vs {OURS}: {ratio:.3f}x median per round (goal <= 1.05x); "
          "rounds " + " ".join(f"{x:.3f}" for x in ratios))


def ceiling(report: Report, cores: int) -> None:
    """The most any loader using this decoder could reach here, against each baseline.

    Decoding alone into memory that is already mapped (one reused array: no
    allocation, no page faults), perfectly spread over every core, runs at ``cores``
    times that one-core rate; a loader that also reads, collates and hands out
    batches cannot beat it. Its ratio to a baseline bounds the ratio any loader can
    show. (Decoding into a fresh array per image, as the bare-decoder baseline does,
    is slower: that rate is no ceiling.)
    """
    rows = {r["name"]: r for r in report.doc["rows"]}
    ideal = cores * rows[ONE_CORE_REUSED]["samples_per_s"]
    bounds = {name: ideal / rows[name]["samples_per_s"] for name, _ in GOALS}
    report.doc["ceiling"] = {"samples_per_s": ideal, "ratio_bound": bounds,
                             "ours_of_ceiling": rows[OURS]["samples_per_s"] / ideal}
    print(f"  ceiling: {cores} cores x one-core decode into a reused array = {ideal:.0f} samples/s; ours is "
          f"{rows[OURS]['samples_per_s'] / ideal:.0%} of it; the most any loader could show: "
          + ", ".join(f"{v:.2f}x vs {k}" for k, v in bounds.items()))


IN_WORKERS = "decode_size in the workers"
AFTER_ONE = "decode_size after delivery, 1 thread (before)"
AFTER_ALL = "decode_size after delivery, all cores (info)"


def _hxw(text: str) -> tuple[int, int]:
    h, _, w = text.lower().partition("x")
    return int(h), int(w or h)


def decode_size_main(args: Any, n: int, cores: int) -> int:
    """``--decode-size``: in the workers vs after delivery, same data, same run."""
    import feedline
    from feedline.decode.jpeg_batch import CpuJpegDecoder

    size = args.decode_size
    with scratch(args, "loader-jpeg-size") as folder:
        root, mean_bytes = build(folder, n)
        report = Report("loader_jpeg_decode_size", args, samples=n, batch_size=64, cores=cores,
                        mean_jpeg_bytes=mean_bytes, decode_size=list(size),
                        load_before=os.getloadavg()[0])
        kw: dict[str, Any] = {"batch_size": 64, "device": args.device, "workers": cores,
                              "prefetch": 2, "seed": 0, "decode_size": size}
        loaders = {IN_WORKERS: feedline.Loader(str(root), **kw),
                   AFTER_ONE: feedline.Loader(str(root), decode_on=CpuJpegDecoder(), **kw),
                   AFTER_ALL: feedline.Loader(str(root), decode_on=CpuJpegDecoder(threads=cores),
                                              **kw)}
        interleaved(report, {name: (lambda lo=lo: ours_pass(lo)) for name, lo in loaders.items()},
                    max(1, args.repeat))
        report.per_round(IN_WORKERS, AFTER_ONE, 1.0)
        report.per_round(IN_WORKERS, AFTER_ALL, 1.0)
        report.doc["load_after"] = os.getloadavg()[0]
        print(f"  load average {report.doc['params']['load_before']:.2f} before, "
              f"{report.doc['load_after']:.2f} after ({cores} cores)")
        for lo in loaders.values():
            lo.close()
    return report.finish()


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--decode-size", type=_hxw, default=None, metavar="HxW",
                   help="compare decode_size in the workers with the decode after delivery")
    args = p.parse_args(argv)
    n = args.samples or (128 if args.quick else 1024)
    cores = os.cpu_count() or 1
    if args.decode_size is not None:
        return decode_size_main(args, n, cores)
    import webdataset as wds
    from torch.utils.data import DataLoader

    import feedline

    with scratch(args, "loader-jpeg") as folder:
        root, mean_bytes = build(folder, n)
        report = Report("loader_jpeg", args, samples=n, batch_size=64, cores=cores,
                        mean_jpeg_bytes=mean_bytes)
        ours = feedline.Loader(str(root), batch_size=64, device=args.device, workers=cores,
                               prefetch=2, seed=0)
        from feedline.decode.jpeg_batch import CpuJpegDecoder

        compressed = feedline.Loader(str(root), batch_size=64, device=args.device, workers=cores,
                                     prefetch=2, seed=0, decode_on=CpuJpegDecoder(threads=cores))
        no_ahead = feedline.Loader(str(root), batch_size=64, device=args.device, workers=cores,
                                   prefetch=2, seed=0, decode_on=CpuJpegDecoder(threads=cores))
        no_ahead._device_decode.decode_ahead = False  # each batch decodes inside its next()
        dl = DataLoader(ShardJpegs(str(root), n), batch_size=64, shuffle=True, drop_last=True,
                        num_workers=cores, persistent_workers=True)
        tars = sorted(str(p) for p in root.glob("*.tar"))
        pipe = wds.WebDataset(tars, shardshuffle=False, empty_check=False).map(_wds_decode) \
            .batched(64, partial=True)
        wl = DataLoader(pipe, batch_size=None, num_workers=min(cores, len(tars)),
                        persistent_workers=True)
        blobs = [bytes(ds_s["jpg"]) for ds_s in feedline.open_dataset(root)]
        pool = ThreadPoolExecutor(cores)
        frame = np.empty((375, 500, 3), np.uint8)

        contenders: dict[str, Callable[[], int]] = {
            OURS: lambda: ours_pass(ours),
            COMPRESSED: lambda: ours_pass(compressed),
            NO_AHEAD: lambda: ours_pass(no_ahead),
            "torch DataLoader": lambda: sum(int(b[0].shape[0]) for b in dl),
            "WebDataset + DataLoader": lambda: sum(int(b[0].shape[0]) for b in wl),
            "bare decoder, all cores": lambda: len(list(pool.map(_decode, blobs))),
            ONE_CORE: lambda: len([_decode(b) for b in blobs]),
            ONE_CORE_REUSED: lambda: len([_decode_into(b, frame) for b in blobs]),
        }
        interleaved(report, contenders, max(1, args.repeat))
        compare_per_round(report)
        rows = {r["name"]: r for r in report.doc["rows"]}
        speedup = rows["bare decoder, all cores"]["samples_per_s"] / rows[ONE_CORE]["samples_per_s"]
        report.doc["cores_effective"] = speedup
        print(f"  bare decoder all cores / one core: {speedup:.2f} (of {cores} cores; "
              "near 1 means other load left this run about one core)")
        ceiling(report, cores)
        plumbing_cost(report)
        ours.close()
        compressed.close()
        no_ahead.close()
        pool.shutdown()
    return report.finish()


if __name__ == "__main__":
    sys.exit(main())
