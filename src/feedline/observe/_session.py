"""The measuring engine shared by :func:`feedline.watch` and ``feedline diagnose``.

A :class:`Session` times each step of the *outermost* loop: the wait inside
``next()`` and the loop body until the following ``next()`` (or an explicit
:meth:`Session.step_done`). It installs the span recorder, the torch hooks
(fetch/collate timing; H2D copies on CUDA) and the host sampler, and can run
the synthetic-batch check (seed 000, Q3): after the measured steps it replays
the last batch ``replay`` times, with device copies served from a cache, so
the same loop body runs without the data path.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any, NoReturn

from feedline import spans
from feedline.observe._host import HostSampler
from feedline.observe._stats import Recorder, Span
from feedline.observe._timing import DeviceTimer, device_type, make_timer
from feedline.observe._torch_hooks import (
    CopyLog,
    install_copy_hook,
    install_fetch_hooks,
    read_worker_spans,
    sched_times,
    set_replay_cache,
    uninstall_copy_hook,
    uninstall_fetch_hooks,
)
from feedline.observe.findings import shm_free_bytes
from feedline.observe.report import Measurements, Report, build_report

LOADER_ATTRS = ("num_workers", "pin_memory", "prefetch_factor", "persistent_workers", "batch_size")


def loader_config(obj: Any) -> dict[str, Any]:
    """The DataLoader-style settings ``obj`` exposes (empty for a plain iterable)."""
    out: dict[str, Any] = {"type": type(obj).__name__}
    for name in LOADER_ATTRS:
        value = getattr(obj, name, None)
        if isinstance(value, (bool, int)) or (value is None and name == "prefetch_factor"):
            out[name] = value
    if "num_workers" not in out and isinstance(getattr(obj, "workers", None), int):
        out["num_workers"] = obj.workers
    return out


def batch_info(batch: Any, depth: int = 0) -> tuple[int | None, int]:
    """(samples, bytes) of a batch: first dimension of the first array, total array bytes."""
    if (hasattr(batch, "shape") and hasattr(batch, "nbytes")) or hasattr(batch, "element_size"):
        shape = tuple(getattr(batch, "shape", ()))
        nbytes = int(batch.numel() * batch.element_size()) if hasattr(batch, "numel") else int(batch.nbytes)
        return (int(shape[0]) if shape else None), nbytes
    if depth > 3:
        return None, 0
    items = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, (list, tuple)) else ()
    samples, total = None, 0
    for item in items:
        s, b = batch_info(item, depth + 1)
        samples = samples if samples is not None else s
        total += b
    return samples, total


class Session:
    """Measures one run. Call :meth:`start`, drive :meth:`next`, then :meth:`report`.

    Args:
        name: label of the run in reports.
        device: where the loop body runs (``"cpu"``, ``"cuda:0"``, a torch.device).
        batch_size: samples per batch for throughput (inferred from the batch if None).
        steps: stop after this many measured steps (``on_limit`` decides how).
        ab: synthetic-batch check: True always, False never, None when the verdict
            is unclear ("balanced") at the end of the measured steps.
        replay: steps of the synthetic-batch check.
        host_interval: seconds between host samples.
    """

    def __init__(self, name: str = "run", device: Any = "cpu", batch_size: int | None = None,
                 *, steps: int | None = None, ab: bool | None = False, replay: int = 10,
                 host_interval: float = 0.5) -> None:
        if steps is not None and steps < 1:
            raise ValueError(f"steps must be >= 1 or None, got {steps!r}")
        if replay < 2:
            raise ValueError(f"replay must be >= 2, got {replay!r}")
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be >= 1 or None, got {batch_size!r}")
        self.name, self.device, self.device_type = name, device, device_type(device)
        self.batch_size, self.steps, self.ab_mode, self.replay = batch_size, steps, ab, replay
        self.recorder = Recorder()
        self.copy_log = CopyLog()
        self.sampler = HostSampler(host_interval, 0 if self.device_type == "cuda" else None)
        self.loader: dict[str, Any] = {}
        self.wait: list[float] = []
        self.wait_runq: list[float] = []
        self.body: list[float] = []
        self.body_starts: list[float] = []
        self.starts: list[float] = []
        self.batch_bytes: int | None = None
        self.pinned: list[float] = []
        self.notes: list[str] = []
        self._pinned_off = False
        self._timer: DeviceTimer | None = None
        self._body: tuple[float, Any] | None = None
        self._last: Any = None
        self._replay_from: int | None = None
        self._replay_left = 0
        self._end_cb: Callable[[], Any] | None = None
        self._worker_dir: str | None = None
        self._hooked = False
        self._stopped = False
        self._tid = threading.get_ident()  # the training thread (set again at the first step)

    # ------------------------------------------------------------ lifecycle
    def start(self) -> Session:
        """Install the recorder, torch hooks (when torch is loaded) and the host sampler."""
        if self._timer is not None:
            return self
        self._timer = make_timer(self.device)
        spans.install(self.recorder)
        if "torch" in sys.modules:
            self._worker_dir = tempfile.mkdtemp(prefix="feedline-workers-")
            install_fetch_hooks(self._worker_dir)
            install_copy_hook(self.copy_log)
            self._hooked = True
        self.sampler.start()
        return self

    def stop(self) -> None:
        """Close the open step, remove every hook, collect worker spans (idempotent)."""
        if self._stopped or self._timer is None:
            return
        self._stopped = True
        self.step_done()
        spans.uninstall(self.recorder)
        self.sampler.stop()
        set_replay_cache(None)
        if self._hooked:
            uninstall_fetch_hooks()
            uninstall_copy_hook(self.copy_log)
        if self._worker_dir is not None:
            self.recorder.add(read_worker_spans(self._worker_dir))
            shutil.rmtree(self._worker_dir, ignore_errors=True)

    # -------------------------------------------------------------- stepping
    def step_done(self) -> None:
        """End the current step's body now (optional explicit boundary)."""
        if self._body is None or self._timer is None:
            return
        t_body, token = self._body
        now = time.perf_counter()
        self._timer.stop(token)
        self.body.append(now - t_body)
        self.body_starts.append(t_body)
        self._body = None

    def next(self, inner: Callable[[], Any], on_limit: Callable[[], Any] | None = None) -> Any:
        """Time one ``next()``: ``inner()`` fetches the batch (raises StopIteration at the end).

        At the step limit (or at the end of the data) the synthetic-batch replay
        runs if requested; then ``on_limit()`` is called at the limit (it should
        raise), or StopIteration propagates at the end of the data.
        """
        if self._timer is None:
            self.start()
        self.step_done()
        # The training thread's run-queue delay during the wait only matters with
        # loader workers (see build_report); in-process loading skips the two reads.
        queued = int(self.loader.get("num_workers") or 0) > 0
        t0 = time.perf_counter()
        q0 = sched_times()[1] if queued else 0.0
        if self._replay_left > 0:
            self._replay_left -= 1
            batch = self._last
        elif self._replay_from is not None:
            self._end(self._end_cb)
        elif self.steps is not None and len(self.wait) >= self.steps:
            batch = self._limit(on_limit)
        else:
            try:
                batch = inner()
            except StopIteration:
                batch = self._limit(None)
        self._after(t0, batch)
        self.wait_runq.append(max(0.0, sched_times()[1] - q0) if queued else 0.0)
        return batch

    def _limit(self, on_limit: Callable[[], Any] | None) -> Any:
        """The measured steps are over: start the replay, or end the run."""
        if self._last is not None and self._want_ab():
            self._replay_from = len(self.wait)
            self._replay_left = self.replay - 1
            self._end_cb = on_limit
            if self.device_type == "cuda":
                set_replay_cache({})
            return self._last
        self._end(on_limit)

    def _end(self, on_limit: Callable[[], Any] | None) -> NoReturn:
        set_replay_cache(None)
        if on_limit is not None:
            on_limit()
        raise StopIteration

    def _want_ab(self) -> bool:
        if self.ab_mode is not None:
            return self.ab_mode
        if len(self.wait) <= 2:
            return False
        m = self.measurements()
        if self._worker_dir is not None:  # worker spans so far (the files stay for the report)
            m.spans = m.spans + read_worker_spans(self._worker_dir)
        return build_report(m).verdict == "balanced"

    def _after(self, t0: float, batch: Any) -> None:
        t1 = time.perf_counter()
        self.wait.append(t1 - t0)
        self.starts.append(t0)
        if len(self.wait) <= 2:
            self._tid = threading.get_ident()
            samples, nbytes = batch_info(batch)
            if self.batch_size is None and samples:
                self.batch_size = samples
            self.batch_bytes = nbytes or self.batch_bytes
        self._last = batch
        if self.device_type == "cuda" and len(self.wait) % 10 == 1 and not self._pinned_off:
            self._sample_pinned()
        timer = self._timer if self._timer is not None else self.start()._timer
        if timer is not None:
            self._body = (time.perf_counter(), timer.start())

    def _sample_pinned(self) -> None:
        import torch

        read = getattr(torch.cuda, "host_memory_stats", None)
        if read is None:
            return  # an older torch: the pinned-growth rule has no data
        try:
            stats = read()
        except RuntimeError as e:
            self.notes.append(f"pinned memory not sampled: {e}")
            self._pinned_off = True
            return
        key = next((k for k in stats if "allocated_bytes" in k and "current" in k), None)
        if key is not None:
            self.pinned.append(float(stats[key]))

    # ------------------------------------------------------------- reporting
    def measurements(self) -> Measurements:
        """What was measured so far, with the replay steps split off as the A/B."""
        end = self._replay_from if self._replay_from is not None else len(self.wait)
        gpu = list(self.body)
        if self.device_type != "cpu" and self._timer is not None:
            gpu = self._timer.finish() if self._stopped else self._timer.snapshot()
        cut = self.starts[end] if end < len(self.starts) else float("inf")
        copies = [(r, d) for r, d in zip(self.copy_log.records, self.copy_log.durations(),
                                         strict=False) if r.start < cut]
        m = Measurements(
            name=self.name, device_type=self.device_type, wait=self.wait[:end],
            wait_runq=self.wait_runq[:end],
            body=self.body[:end], gpu=gpu[:end], spans=self.recorder.spans() + self._loop_spans(),
            step_starts=self.starts[:end],
            copy_times=[d for _, d in copies],
            blocking_copy_s=sum(d for r, d in copies if not (r.pinned and r.non_blocking)),
            copies=self.copy_log.summary(), loader=dict(self.loader),
            batch_samples=self.batch_size, batch_bytes=self.batch_bytes,
            host=self.sampler.summary(), pinned_series=list(self.pinned),
            cores=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1),
            gpus=_gpu_count(self.device_type), shm_free=shm_free_bytes(),
        )
        if self._replay_from is not None:
            m.ab = _ab(self.wait, self.body, gpu, end)
        return m

    def _loop_spans(self) -> list[Span]:
        """The ``wait`` and ``step`` spans of the training loop, built from the step lists.

        Kept as plain lists while running (no span record per step) and turned
        into spans only here, for traces and the HTML timeline.
        """
        pid, tid = os.getpid(), self._tid
        out = [Span("wait", t0, t0 + w, pid, tid, {"step": i})
               for i, (t0, w) in enumerate(zip(self.starts, self.wait, strict=False))]
        out += [Span("step", t0, t0 + b, pid, tid, {"step": i})
                for i, (t0, b) in enumerate(zip(self.body_starts, self.body, strict=False))]
        return out

    def report(self) -> Report:
        """Stop (if still running) and build the :class:`Report`."""
        self.stop()
        rep = build_report(self.measurements())
        if self.notes:
            rep.host = rep.host | {"notes": list(self.notes)}
        return rep


def _ab(wait: list[float], body: list[float], gpu: list[float], end: int) -> dict[str, Any] | None:
    """Step time with the data path (measured steps) vs without (replay, first one skipped)."""
    k = 1 if end > 1 else 0
    real = [a + b for a, b in zip(wait[k:end], body[k:end], strict=False)]
    fake = [a + b for a, b in zip(wait[end + 1:], body[end + 1:], strict=False)]
    if not real or not fake:
        return None
    real.sort()
    fake.sort()
    with_data, without = real[len(real) // 2], fake[len(fake) // 2]
    return {"steps": len(fake), "with_data_path": with_data, "without_data_path": without,
            "ratio": with_data / without if without > 0 else None,
            "gpu_without_data_path": sorted(gpu[end + 1:])[len(gpu[end + 1:]) // 2] if gpu[end + 1:] else None}


def _gpu_count(kind: str) -> int:
    if kind != "cuda":
        return 1
    import torch

    return max(1, torch.cuda.device_count())
