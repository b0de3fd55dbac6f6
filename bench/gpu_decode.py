"""JPEG decode on the GPU vs on all the host's cores (issue 15, seed 000).

For 1920x1080 and 256x256 JPEGs, batch 64:

1. images/s of CPU decode on every core (simplejpeg in a thread pool, each
   thread decoding into one reused array: the decode ceiling of
   bench/loader_jpeg.py) vs GPU decode of the same compressed batch through
   :mod:`feedline.decode.jpeg_batch` (pinned compressed buffer ->
   torchvision's batched nvJPEG, and nvImageCodec when installed), timed to a
   device sync;
2. PCIe bytes per batch: compressed (what GPU decode sends) vs decoded (what
   CPU decode sends);
3. the GPU utilisation of a small conv model fed each way (CPU decode in a
   background thread with a prefetch of 2 batches + H2D; ``Loader(decode_on=
   "gpu")`` with decode-ahead, the next batch decoding while the model steps,
   and without it, each batch decoded inside its ``next()``; and the bare GPU
   decode in the loop): model time from CUDA events over wall time.

Goal: GPU decode >= 3x CPU decode on all cores for 1920x1080, and >= 90%
utilisation fed from GPU decode. Without CUDA only the CPU rows run and the
GPU rows say why (``--device cpu`` is what the smoke test uses).

    python bench/gpu_decode.py --device cuda [--quick] [--json PATH]
"""

from __future__ import annotations

import os
import queue
import statistics
import sys
import tempfile
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from loader_common import Report, parser

SIZES = {"1080p": (1080, 1920), "256": (256, 256)}


def _photo_like(h: int, w: int, seed: int) -> np.ndarray:
    """Smooth gradients plus mild noise: compresses like a photo, not like noise or a flat fill."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    base = np.stack([x / w * 255, y / h * 255, (x + y) / (w + h) * 255], axis=-1)
    noise = rng.normal(0, 12, (h, w, 3)).astype(np.float32)
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def make_jpegs(n: int, h: int, w: int) -> list[bytes]:
    import simplejpeg

    distinct = [simplejpeg.encode_jpeg(_photo_like(h, w, s), quality=90) for s in range(min(n, 8))]
    return [distinct[i % len(distinct)] for i in range(n)]


def cpu_decode_rate(blobs: list[bytes], h: int, w: int, threads: int, repeat: int) -> float:
    """Images/s of simplejpeg on ``threads`` threads, each decoding into its own reused array."""
    import simplejpeg

    local = threading.local()

    def one(b: bytes) -> None:
        out = getattr(local, "out", None)
        if out is None:
            out = local.out = np.empty((h, w, 3), dtype=np.uint8)
        simplejpeg.decode_jpeg(b, colorspace="RGB", buffer=out)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, blobs))  # warm-up
        runs = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            list(pool.map(one, blobs))
            runs.append(time.perf_counter() - t0)
    return len(blobs) / statistics.median(runs)


def gpu_decode_rate(decoder: Any, batch: Any, repeat: int) -> float:
    import torch

    decoder.decode(batch)
    torch.cuda.synchronize()
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        decoder.decode(batch)
        torch.cuda.synchronize()
        runs.append(time.perf_counter() - t0)
    return len(batch) / statistics.median(runs)


def _model(device: str) -> Any:
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(3, 32, 5, stride=2), nn.ReLU(), nn.Conv2d(32, 64, 3, stride=2), nn.ReLU(),
        nn.Conv2d(64, 128, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(128, 10),
    ).to(device)


def utilisation(feed: Any, steps: int, device: str) -> float:
    """Fraction of wall time the GPU spends in the model step, fed by ``feed()`` (NHWC uint8 on device)."""
    import torch

    model = _model(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    events = []
    x = feed()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        inp = x.permute(0, 3, 1, 2).float().div_(255)
        loss = model(inp).logsumexp(1).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        end.record()
        events.append((start, end))
        x = feed()
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    busy = sum(s.elapsed_time(e) for s, e in events) / 1e3
    return busy / wall


def cpu_feed(blobs: list[bytes], h: int, w: int, threads: int, device: str, size: tuple[int, int]) -> Any:
    """Decode on the CPU in a background thread (prefetch 2), resize on the GPU, pinned H2D."""
    import torch

    from feedline.decode.jpeg_batch import CompressedBatch, CpuJpegDecoder

    q: queue.Queue[Any] = queue.Queue(maxsize=2)
    stop = threading.Event()
    dec = CpuJpegDecoder()
    batch = CompressedBatch.pack(blobs)

    def produce() -> None:
        with ThreadPoolExecutor(threads) as pool:
            while not stop.is_set():
                images = list(pool.map(lambda i: dec.decode(CompressedBatch.pack([batch.item(i)]))[0],
                                       range(len(batch))))
                host = torch.stack(images).pin_memory()
                q.put(host)

    t = threading.Thread(target=produce, daemon=True)
    t.start()

    def feed() -> Any:
        host = q.get()
        dev = host.to(device, non_blocking=True)
        if tuple(dev.shape[1:3]) != size:
            dev = torch.nn.functional.interpolate(dev.permute(0, 3, 1, 2).float(), size=size).to(
                torch.uint8).permute(0, 2, 3, 1)
        return dev

    feed.stop = stop  # type: ignore[attr-defined]
    return feed


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=30, help="model steps per utilisation run")
    args = p.parse_args(argv)
    if args.quick:
        args.batch, args.steps = 8, 4
    report = Report("gpu_decode", args, batch=args.batch)
    threads = len(os.sched_getaffinity(0))
    cuda = args.device.startswith("cuda")
    if cuda:
        import torch

        if not torch.cuda.is_available():
            print("gpu_decode: --device cuda but CUDA is not available", file=sys.stderr)
            return 2
    errors = 0
    sizes = {"256": SIZES["256"], "1080p": (108, 192)} if args.quick else SIZES
    for label, (h, w) in sizes.items():
        blobs = make_jpegs(args.batch, h, w)
        cpu_rate = cpu_decode_rate(blobs, h, w, threads, max(3, args.repeat))
        compressed = sum(map(len, blobs))
        decoded = args.batch * h * w * 3
        row: dict[str, Any] = {"name": f"{label} cpu decode ({threads} threads)", "images_per_s": cpu_rate,
                               "samples_per_s": cpu_rate, "pcie_bytes_per_batch": decoded}
        report.add(row)
        print(f"{label:>6}  cpu x{threads}: {cpu_rate:10.0f} images/s   PCIe/batch decoded "
              f"{decoded / 2**20:8.1f} MiB, compressed {compressed / 2**20:6.2f} MiB "
              f"({decoded / compressed:.1f}x less)")
        if not cuda:
            report.add({"name": f"{label} gpu decode", "skipped": "no CUDA device (--device cpu)"})
            continue
        try:  # a GPU failure is a row with the error; the CPU rows and other sizes still count
            gpu_rows(report, args, label, blobs, h, w, threads, cpu_rate, compressed)
        except Exception as e:
            errors += 1
            traceback.print_exc()
            report.add({"name": f"{label} gpu decode", "error": f"{type(e).__name__}: {e}"})
        report.finish()  # the JSON so far: a later crash or timeout keeps these rows
    return report.finish() or (1 if errors else 0)


def gpu_rows(report: Report, args: Any, label: str, blobs: list[bytes], h: int, w: int,
             threads: int, cpu_rate: float, compressed: int) -> None:
    """The GPU decode rows of one image size: images/s per decoder, then model utilisation."""
    import torch

    from feedline.decode.jpeg_batch import (
        CompressedBatch,
        TorchvisionJpegDecoder,
        gpu_decoders_available,
    )

    pinned = torch.empty(compressed, dtype=torch.uint8).pin_memory()
    batch = CompressedBatch.pack(blobs, out=pinned.numpy())
    decoders: list[Any] = [TorchvisionJpegDecoder(args.device)]
    if "nvimgcodec" in gpu_decoders_available():
        from feedline.decode.jpeg_batch import NvImageCodecDecoder

        decoders.append(NvImageCodecDecoder(args.device))
    for dec in decoders:
        rate = gpu_decode_rate(dec, batch, max(3, args.repeat))
        report.add({"name": f"{label} gpu decode ({dec.name})", "images_per_s": rate,
                    "samples_per_s": rate, "pcie_bytes_per_batch": compressed,
                    "vs_cpu_all_cores": rate / cpu_rate})
        print(f"{label:>6}  gpu {dec.name}: {rate:10.0f} images/s  = {rate / cpu_rate:.2f}x cpu "
              f"(goal >= 3x at 1080p)")
    size = (224, 224)
    feed_cpu = cpu_feed(blobs, h, w, threads, args.device, size)
    try:
        u_cpu = utilisation(feed_cpu, args.steps, args.device)
    finally:
        feed_cpu.stop.set()  # type: ignore[attr-defined]
    u_inline = utilisation(lambda d=decoders[0], b=batch, s=size: d.decode(b, size=s), args.steps,
                           args.device)
    with tempfile.TemporaryDirectory(prefix="gpu-decode-") as tmp:
        root = pack_jpegs(blobs, tmp)
        fed = {}
        for ahead in (False, True):
            feed = loader_feed(root, args.device, "gpu", size, args.batch, threads, ahead)
            try:
                fed[ahead] = utilisation(feed, args.steps, args.device)
            finally:
                feed.close()  # type: ignore[attr-defined]
    report.add({"name": f"{label} model utilisation", "fed_by_cpu_decode": u_cpu,
                "fed_by_gpu_decode": fed[True], "fed_by_gpu_decode_no_ahead": fed[False],
                "fed_by_gpu_decode_inline_no_loader": u_inline, "goal_gpu": 0.9})
    print(f"{label:>6}  model GPU utilisation: fed by CPU decode {u_cpu:.0%}, by Loader(decode_on='gpu') "
          f"{fed[True]:.0%} with decode-ahead, {fed[False]:.0%} without (each batch decoded in its "
          f"next()), bare decode in the loop {u_inline:.0%} (goal >= 90%)")


def pack_jpegs(blobs: list[bytes], folder: str) -> str:
    """``blobs`` as a packed dataset (eight copies: several batches per epoch) under ``folder``."""
    from feedline.format import pack

    src = os.path.join(folder, "src")
    os.makedirs(src)
    for i in range(8 * len(blobs)):
        with open(os.path.join(src, f"{i:06d}.jpg"), "wb") as f:
            f.write(blobs[i % len(blobs)])
    pack([src], os.path.join(folder, "ds"))
    return os.path.join(folder, "ds")


def loader_feed(root: str, device: str, decode_on: Any, size: tuple[int, int], batch: int,
                workers: int, ahead: bool) -> Any:
    """Batches of ``Loader(decode_on=..., decode_size=size)`` over ``root``, epoch after epoch:
    with ``ahead`` the next batch decodes while the model steps (decode-ahead), without it
    each batch decodes inside the ``next()`` that delivers it."""
    import feedline

    loader = feedline.Loader(root, batch_size=batch, device=device, workers=workers,
                             decode_on=decode_on, decode_size=size, shuffle=False, drop_last=True)
    stage = loader._device_decode
    assert stage is not None, loader.decode_on
    stage.decode_ahead = ahead

    def batches() -> Any:
        epoch = 0
        while True:
            loader.set_epoch(epoch)
            yield from loader
            epoch += 1

    it = batches()

    def feed() -> Any:
        return next(it)["jpg"]

    feed.close = loader.close  # type: ignore[attr-defined]
    return feed




if __name__ == "__main__":
    raise SystemExit(main())
