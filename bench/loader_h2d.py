"""H2D on a GPU: copy bandwidth from our pinned slots, and the data stall of a real step.

1. Bandwidth of one 64 MiB host->device copy, timed with CUDA events, from:
   a feedline pinned slot through the transfer engine (copy stream,
   non_blocking), pageable memory (``tensor.to(device)``), and the best plain
   torch pinned copy (``pin_memory()`` + ``non_blocking=True``) - the baseline.
2. Data-stall fraction of a real model step (a small conv net, batch 64 of
   3x224x224 uint8 images converted on the GPU): step time fed by
   ``feedline.Loader`` vs the same step on a batch already in device memory
   (the seed-003 synthetic A/B): ``stall = 1 - t_synthetic / t_loader``.

Needs CUDA: without it the script exits 2 with a message (never a silent skip).

    .venv/bin/python bench/loader_h2d.py --device cuda [--quick] [--json PATH]
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np

from loader_common import Report, parser


def _bandwidth(report: Report, name: str, copy: Any, nbytes: int, repeat: int,
               stream: Any = None) -> None:
    """Median bandwidth of ``copy()``, timed with CUDA events on the stream it runs on."""
    import torch

    stream = stream or torch.cuda.current_stream()
    copy()  # warm-up
    torch.cuda.synchronize()
    runs = []
    for _ in range(max(3, repeat)):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        copy()
        end.record(stream)
        end.synchronize()
        runs.append(start.elapsed_time(end) / 1e3)
    med = float(np.median(runs))
    report.add({"name": name, "median_s": med, "runs_s": runs, "samples": 1,
                "samples_per_s": 1 / med, "GBps": nbytes / med / 1e9})
    print(f"{name:<36} {nbytes / med / 1e9:8.2f} GB/s")


class Images:
    def __init__(self, n: int) -> None:
        self.n = n
        self.img = np.random.default_rng(0).integers(0, 255, (3, 224, 224), dtype=np.uint8)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"image": self.img, "label": i % 10}


def _stall(report: Report, dev: Any, batches: int) -> dict[str, float]:
    import torch
    from torch import nn

    import feedline

    model = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3), nn.ReLU(), nn.Conv2d(64, 128, 3, 2, 1),
                          nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(128, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(images: Any, labels: Any) -> None:
        x = images.float().div_(255)
        loss = nn.functional.cross_entropy(model(x), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    loader = feedline.Loader(Images(64 * batches), batch_size=64, device=str(dev), workers=8,
                             prefetch=4, shuffle=False)
    fixed = next(iter(loader))

    def with_loader() -> int:
        for b in loader:
            step(b["image"], b["label"])
        torch.cuda.synchronize()
        return batches

    def synthetic() -> int:
        for _ in range(batches):
            step(fixed["image"], fixed["label"])
        torch.cuda.synchronize()
        return batches

    real = report.time("model step fed by feedline.Loader", with_loader)
    synth = report.time("model step on a batch in device memory", synthetic)
    loader.close()
    stall = max(0.0, 1 - synth["median_s"] / real["median_s"])
    print(f"data-stall fraction: {stall:.1%}")
    return {"stall_fraction": stall, "step_s_loader": real["median_s"] / batches,
            "step_s_synthetic": synth["median_s"] / batches}


def main(argv: list[str] | None = None) -> int:
    args = parser(__doc__.splitlines()[0]).parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("loader_h2d needs CUDA (run it on the GPU machine via bench/gpu_check.py)",
              file=sys.stderr)
        return 2
    device = "cuda:0" if args.device in ("cuda", "cpu") else args.device
    dev = torch.device(device)
    from feedline.pipeline import collate
    from feedline.pipeline.slots import SlotPool
    from feedline.pipeline.transfer import CudaEngine

    nbytes = (16 if args.quick else 64) << 20
    report = Report("loader_h2d", args, copy_bytes=nbytes, device=torch.cuda.get_device_name(dev))
    layout = collate.infer_layout([{"x": np.zeros(nbytes, np.uint8)}], 1, 1)
    pool = SlotPool(nbytes, pin=True)
    pool.configure(layout)
    slot = pool.acquire()
    engine = CudaEngine(dev)
    pageable = torch.empty(nbytes, dtype=torch.uint8)
    pinned = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
    _bandwidth(report, "feedline slot -> copy stream",
               lambda: engine.send(slot.tensors[("x",)]), nbytes, args.repeat, engine.stream)
    _bandwidth(report, "pageable tensor.to(device)", lambda: pageable.to(dev), nbytes, args.repeat)
    _bandwidth(report, "torch pinned, non_blocking",
               lambda: pinned.to(dev, non_blocking=True), nbytes, args.repeat)
    report.compare("feedline slot -> copy stream", "torch pinned, non_blocking", 0.9,
                   key="GBps")
    report.compare("feedline slot -> copy stream", "pageable tensor.to(device)", 1.0,
                   key="GBps")
    pool.close()
    t0 = time.perf_counter()
    report.doc["stall"] = _stall(report, dev, 10 if args.quick else 50)
    report.doc["stall_wall_s"] = time.perf_counter() - t0
    return report.finish()


if __name__ == "__main__":
    sys.exit(main())
