"""``feedline demo`` end to end: make a raw log, pack it, train twice, compare.

:func:`run_demo` is the whole story of seed 003 on the machine it runs on:

1. write a synthetic multi-sensor driving log as one small file per field;
2. pack it into shards (``feedline.format.pack``);
3. train the same small model from the same init for the same steps twice:
   the seed's naive ``DataLoader(num_workers=0, pin_memory=False)`` over the
   small files, then ``feedline.Loader`` over the shards; both watched by
   ``feedline.watch``;
4. print the before/after table, write the HTML report and, on request, JSON.

Around each measured run :mod:`feedline.demo.contention` reads the kernel's
load counters; when the loader and the step (or other programs) fought over
too few cores, the table says so instead of presenting the speedup as the
result.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from feedline.demo.synth import SynthConfig

DEFAULT_REPORT_DIR = Path("feedline-demo")


@dataclass(frozen=True)
class DemoConfig:
    """Options of ``feedline demo`` (see the CLI for their help)."""

    synth: SynthConfig = field(default_factory=SynthConfig)
    steps: int = 50
    batch_size: int = 16
    workers: int | None = None
    device: str | None = None
    out: Path | None = None
    keep: bool = False
    json_path: Path | None = None
    html_path: Path | None = None
    shard_size: int = 16 * 2**20

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first bad option."""
        self.synth.validate()
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.batch_size < 1 or self.batch_size > self.synth.frames:
            raise ValueError(
                f"batch_size must be in 1..frames ({self.synth.frames}), got {self.batch_size}"
            )
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        if self.shard_size < 1:
            raise ValueError(f"shard_size must be >= 1, got {self.shard_size}")
        kind, _, index = (self.device or "cpu").partition(":")
        if kind not in ("cpu", "cuda") or (index and not index.isdigit()):
            raise ValueError(f"device must be 'cpu' or 'cuda[:N]', got {self.device!r}")


@dataclass(frozen=True)
class DemoResult:
    """What a demo run leaves behind (paths exist unless the work dir was removed)."""

    table: dict[str, Any]
    html_path: Path
    json_path: Path | None
    work_dir: Path
    wall_s: float


def default_workers(device: str) -> int:
    """Loader threads for this machine and device.

    On CUDA: the cores, at most 8 (seed 000's ``min(cores / gpus, 8)``). On
    cpu the training step itself runs on the cores, so the loader gets half
    of them (at least 1): more threads only slow the step's own parallel math.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cores = max(1, cores or 1)
    return min(cores, 8) if device.startswith("cuda") else max(1, cores // 2)


@contextmanager
def _work_dir(cfg: DemoConfig) -> Iterator[Path]:
    if cfg.out is not None:
        cfg.out.mkdir(parents=True, exist_ok=True)
        yield cfg.out
        return
    path = Path(tempfile.mkdtemp(prefix="feedline-demo-"))
    try:
        yield path
    finally:
        if not cfg.keep:
            shutil.rmtree(path, ignore_errors=True)


def _bar(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console, transient=False,
    )


def run_demo(cfg: DemoConfig, console: Console | None = None) -> DemoResult:
    """Run the whole demo; print progress and the table to ``console``.

    The HTML report goes to ``cfg.html_path``, by default ``report.html`` in
    ``cfg.out``, or in ``./feedline-demo/`` when the work dir is temporary.

    Raises:
        ValueError: a bad option (named).
        FeedlineError: a feedline piece failed (its place and fix in the message).
    """
    from feedline.demo.runs import pick_device

    cfg.validate()
    device = pick_device(cfg.device)  # before any work: a missing GPU fails now
    console = console or Console()
    start = time.perf_counter()
    with _work_dir(cfg) as work:
        html_path = cfg.html_path or (cfg.out or DEFAULT_REPORT_DIR) / "report.html"
        html_path.parent.mkdir(parents=True, exist_ok=True)
        table = _run_in(cfg, device, work, html_path, console)
    if cfg.json_path is not None:
        cfg.json_path.write_text(json.dumps(table, indent=2) + "\n")
    wall = time.perf_counter() - start
    console.print(f"HTML report: {html_path}" + (f"; JSON: {cfg.json_path}" if cfg.json_path else ""))
    if cfg.out is not None or cfg.keep:
        console.print(f"raw log and shards kept in: {work}")
    console.print(f"demo wall time: {wall:.1f} s")
    return DemoResult(table, html_path, cfg.json_path, work, wall)


def _run_in(
    cfg: DemoConfig, device: str, work: Path, html_path: Path, console: Console
) -> dict[str, Any]:
    from feedline.demo import _parts, contention, runs, table
    from feedline.demo.align import misaligned
    from feedline.demo.model import FIELDS_PER_FRAME
    from feedline.demo.synth import make_driving_log

    first = contention.snapshot()  # the load average before this demo added its own
    workers = cfg.workers or default_workers(device)
    raw, packed = work / "raw", work / "packed"
    with _bar(console) as bar:
        task = bar.add_task(f"1/4 writing the raw log ({FIELDS_PER_FRAME} files per frame)",
                            total=cfg.synth.frames)
        make_driving_log(cfg.synth, raw, workers=workers, progress=lambda n: bar.advance(task, n))
    with _bar(console) as bar:
        task = bar.add_task("2/4 packing the small files into shards", total=None)
        _parts.pack(raw, packed, shard_size=cfg.shard_size, workers=workers,
                    progress=lambda done, total: bar.update(task, completed=done, total=total))
    init, imu_shape, naive = _model_init(cfg, raw)
    console.print(f"3/4 training {cfg.steps} steps twice on {device} "
                  "(after 10 unmeasured steps of each loader)")
    fast = _parts.feedline_loader(packed, batch_size=cfg.batch_size, device=device,
                                  workers=workers, seed=cfg.synth.seed)
    with _lidar_lists_expected():
        runs.warm_up(init, imu_shape, (naive, fast), device)
    plans = (
        ("before", "DataLoader(num_workers=0, pin_memory=False) over the small files", naive,
         True),
        ("after", f"feedline.Loader(workers={workers}) over the shards", fast, False),
    )
    figures, reports, loads = [], [], {}
    threads = compute_threads(device, workers)
    if threads is not None:
        console.print(f"on cpu the model stands in for the accelerator: it gets {threads} "
                      "thread(s) in both runs, the other cores are the loader's", highlight=False)
    with _bar(console) as bar, _torch_threads(threads), _lidar_lists_expected():
        for name, loader_text, batches, copy in plans:
            task = bar.add_task(f"  {name}", total=cfg.steps)
            before = replace(contention.snapshot(), loadavg=first.loadavg)
            out = runs.measured_run(
                batches, name=name, init=init, imu_shape=imu_shape, device=device,
                steps=cfg.steps, batch_size=cfg.batch_size, copy_to_device=copy,
                on_step=partial(bar.advance, task, 1), verify=misaligned,
            )
            loads[name] = contention.assess(before, contention.snapshot())
            reports.append(out.report)
            figures.append(table.figures_from_report(
                out.report, name=name, loader=loader_text, device=device, steps=cfg.steps,
                batch_size=cfg.batch_size, wall_s=out.wall_s, losses=out.losses,
            ))
    console.print("4/4 the before/after table")
    comp = table.comparison(figures[0], figures[1])
    table.render(comp, console, loads)
    console.print("both runs: each sample of the first batch had its 6 cameras, lidar sweep "
                  "and IMU window from one timestamp (checked)", highlight=False)
    _parts.write_html(reports, html_path, headline=table.headline(comp, loads))
    result = table.to_json(comp, frames=cfg.synth.frames, workers=workers, device=device,
                           host={k: v.to_dict() for k, v in loads.items()},
                           host_contended=any(v.contended for v in loads.values()))
    result["compute_threads"] = threads
    return result


def compute_threads(device: str, workers: int) -> int | None:
    """Intra-op threads for the model in *both* measured runs, or None to leave torch's.

    On a GPU the step runs on the device and the host cores belong to the
    loader. On cpu the step would otherwise spread over every core and fight
    the loader's threads for them, so the model gets the cores the loader does
    not use (at least one), the same in both runs.
    """
    if not device.startswith("cpu"):
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (cores or 1) - workers)


@contextmanager
def _lidar_lists_expected() -> Iterator[None]:
    """The demo's model takes each lidar sweep as it is, a list of ``N x 4`` arrays (as the
    naive loader's collate gives them): the Loader's one-time warning that the field comes as
    a list is advice for a user's own loop, and here it only pointed into the demo's code."""
    from feedline.demo.model import LIDAR_FIELD

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=f"field {re.escape(repr(LIDAR_FIELD))}: ",
                                category=RuntimeWarning)
        yield


@contextmanager
def _torch_threads(n: int | None) -> Iterator[None]:
    import torch

    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _model_init(cfg: DemoConfig, raw: Path) -> tuple[dict[str, Any], tuple[int, int], Any]:
    import torch

    from feedline.demo.model import DemoNet
    from feedline.demo.naive import naive_loader

    imu_shape = (cfg.synth.imu_window, cfg.synth.imu_channels)
    torch.manual_seed(cfg.synth.seed)
    init = {k: v.clone() for k, v in DemoNet(imu_shape).state_dict().items()}
    return init, imu_shape, naive_loader(raw, cfg.batch_size, seed=cfg.synth.seed)
