"""Host signals during a run: what iostat, mpstat and nvidia-smi dmon would show.

:class:`HostSampler` runs a daemon thread that samples psutil about every
``interval`` seconds (10 Hz by default; each sample costs well under a
millisecond): per-core CPU use, context switches, disk read throughput and
read wait (``read_time`` / ``busy_time`` where the platform has them). When
NVML (``pynvml``) is importable and a GPU is present it also samples SM
utilisation and PCIe receive bandwidth. :meth:`summary` reduces the samples to
a JSON-able dict; :attr:`series` keeps the time series for plots.

It also reads Linux schedstat of the loader's threads (every thread of the
training process but the main one and feedline's own, and every thread of its
child processes: DataLoader and Loader workers, of any start method) and keeps
how long they waited for a CPU core per second of CPU they used
(``loader_runq_per_cpu``): a stage that reports only its CPU time (the
Loader's) can then tell time spent queued for a core on a busy host from time
blocked on I/O.

The GIL probe (:func:`gil_wait`) runs on its own thread, more often (every
``GIL_EVERY`` seconds) than the other signals, and :meth:`summary` can keep only the probes inside
the measured steps: a short run has few samples, and those taken before the
loader starts say nothing about its threads.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

import psutil

from feedline.children import child_pids


def cuda_ordinal(device: Any) -> int:
    """The CUDA ordinal a run computes on: ``cuda:N`` / ``N`` / ``torch.device``'s index;
    for a bare ``"cuda"``, ``LOCAL_RANK`` (a launcher's rank ``r`` calls
    ``torch.cuda.set_device(r)``), else 0."""
    index: int | None = None
    if isinstance(device, int) and not isinstance(device, bool):
        index = device
    elif isinstance(device, str):
        tail = device.split(":", 1)[1].strip() if ":" in device else ""
        index = int(tail) if tail.isdigit() else None
    elif isinstance(getattr(device, "index", None), int):  # torch.device
        index = device.index
    if index is None:
        rank = os.environ.get("LOCAL_RANK", "")
        index = int(rank) if rank.isdigit() else 0
    return int(index)


def nvml_target(ordinal: int, visible: str | None) -> tuple[str, int | str] | None:
    """How NVML finds CUDA device ``ordinal`` (NVML numbers every GPU of the host in PCI
    order, CUDA only the ``CUDA_VISIBLE_DEVICES`` ones): ``("index", i)`` or ``("uuid",
    "GPU-...")``; ``None`` when the mask hides it or names a MIG instance.

    With no mask (or integer entries) CUDA's order is taken to be NVML's, as it is with
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` and on hosts whose GPUs are all the same model."""
    if visible is None:
        return ("index", ordinal)
    entries = [e.strip() for e in visible.split(",")]
    entries = entries[: next((k for k, e in enumerate(entries) if not e), len(entries))]
    if not 0 <= ordinal < len(entries):
        return None
    entry = entries[ordinal]
    if entry.isdigit():
        return ("index", int(entry))
    if entry.startswith("GPU-"):
        return ("uuid", entry)
    return None  # a MIG instance or a form NVML cannot look up by itself


def _nvml_handle(ordinal: int) -> Any:
    target = nvml_target(ordinal, os.environ.get("CUDA_VISIBLE_DEVICES"))
    if target is None:
        return None
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        kind, key = target
        handle = (pynvml.nvmlDeviceGetHandleByUUID(key) if kind == "uuid"
                  else pynvml.nvmlDeviceGetHandleByIndex(key))
        return (pynvml, handle)
    except pynvml.NVMLError:
        return None


class HostSampler:
    """Background sampler of host (and, with NVML, GPU) signals.

    Args:
        interval: seconds between samples (> 0).
        gpu_index: CUDA ordinal of the GPU to sample (mapped to NVML's numbering through
            ``CUDA_VISIBLE_DEVICES``, see :func:`nvml_target`), or ``None`` for no GPU.
    """

    def __init__(self, interval: float = 0.5, gpu_index: int | None = None,
                 extra: Callable[[], None] | None = None) -> None:
        """``extra``: also called at each sample, on the sampler thread (e.g. pinned memory)."""
        if not interval > 0:
            raise ValueError(f"interval must be > 0, got {interval!r}")
        self.interval = interval
        self.gpu_index = gpu_index
        self.series: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._gil_thread: threading.Thread | None = None
        self._nvml: Any = None
        self._extra = extra
        self.gil: list[tuple[float, float]] = []
        """(time, ms) of each GIL probe (see :func:`gil_wait`)."""
        self._tasks = TaskClock()

    def start(self) -> HostSampler:
        """Start sampling (idempotent)."""
        if self._thread is not None:
            return self
        if self.gpu_index is not None:
            self._nvml = _nvml_handle(self.gpu_index)
        psutil.cpu_percent(percpu=True)  # prime the per-core counters
        self._thread = threading.Thread(target=self._run, name="feedline-host", daemon=True)
        self._thread.start()
        self._gil_thread = threading.Thread(target=self._probe_gil, name="feedline-gil", daemon=True)
        self._gil_thread.start()
        for t in (self._thread, self._gil_thread):
            if t.native_id is not None:
                self._tasks.skip.add(t.native_id)
        return self

    def stop(self) -> None:
        """Stop sampling and join the thread."""
        self._stop.set()
        for t in (self._thread, self._gil_thread):
            if t is not None:
                t.join(timeout=2.0)

    def _counters(self) -> dict[str, Any]:
        disk = psutil.disk_io_counters()
        row: dict[str, Any] = {
            "t": time.perf_counter(),
            "cpu": psutil.cpu_percent(percpu=True),
            "ctx": psutil.cpu_stats().ctx_switches,
            "read_bytes": getattr(disk, "read_bytes", 0),
            "read_count": getattr(disk, "read_count", 0),
            "read_time": getattr(disk, "read_time", 0),
            "busy_time": getattr(disk, "busy_time", None),
        }
        if self._nvml is not None:
            nv, handle = self._nvml
            try:
                row["sm"] = nv.nvmlDeviceGetUtilizationRates(handle).gpu
                row["pcie_rx_kb"] = nv.nvmlDeviceGetPcieThroughput(handle, nv.NVML_PCIE_UTIL_RX_BYTES)
            except nv.NVMLError as e:
                row["nvml_error"] = str(e)
        row["tasks_cpu"], row["tasks_runq"] = self._tasks.sample()
        return row

    def _run(self) -> None:
        while not self._stop.is_set():
            self.series.append(self._counters())
            if self._extra is not None:
                self._extra()
            self._stop.wait(self.interval)
        self.series.append(self._counters())

    def _probe_gil(self) -> None:
        # its own thread: under GIL contention each psutil call of a sample waits for the
        # GIL too, and probes taken between them would be too few in a short run
        while not self._stop.is_set():
            self.gil.append((time.perf_counter(), gil_wait() * 1e3))
            self._stop.wait(GIL_EVERY)

    def summary(self, window: tuple[float, float] | None = None) -> dict[str, Any]:
        """Means over the run: CPU per core, switches/s, disk MB/s and wait, GPU SM %, PCIe RX.

        ``window`` (perf_counter start, end): the GIL wait is the mean of the
        probes inside it (of all probes when none falls inside). A
        waking thread gets the GIL either at once or at the holder's next switch
        (5 ms): the wait is bimodal, so a median of a few probes flips between
        the two and the mean is the stable figure.
        """
        out = summarize_series(self.series, psutil.cpu_count() or 1)
        gil = [ms for _, ms in self.gil]
        if window is not None:
            inside = [ms for t, ms in self.gil if window[0] <= t <= window[1]]
            gil = inside or gil
        if gil:
            out["gil_wait_ms"] = round(sum(gil) / len(gil), 3)
        if self.gpu_index is not None and self._nvml is None:
            out["nvml"] = "GPU SM and PCIe not sampled: pip install nvidia-ml-py (pynvml)"
        return out


GIL_PROBES = 3
GIL_PROBE_S = 0.0005
GIL_EVERY = 0.05
"""Seconds between GIL probes (each sleeps ``GIL_PROBES`` x ``GIL_PROBE_S``)."""


def gil_wait() -> float:
    """Seconds this thread waited for the GIL after a short sleep (mean of a few probes).

    A thread that wakes from ``sleep`` needs the GIL back; when other threads
    run Python without pause it waits up to the switch interval (5 ms) or
    longer. The oversleep minus the time spent queued for a CPU core (Linux
    schedstat) is the wait for the GIL: near zero when workers block on I/O
    or run code that releases the GIL, milliseconds when they hold it.
    """
    from feedline.observe._torch_hooks import sched_times

    got = []
    for _ in range(GIL_PROBES):
        q0 = sched_times()[1]
        t0 = time.perf_counter()
        time.sleep(GIL_PROBE_S)
        over = time.perf_counter() - t0 - GIL_PROBE_S
        got.append(max(0.0, over - (sched_times()[1] - q0)))
    return sum(got) / len(got)


def summarize_series(series: list[dict[str, Any]], cores: int) -> dict[str, Any]:
    """Reduce raw samples (see :class:`HostSampler`) to per-run figures."""
    out: dict[str, Any] = {"samples": len(series), "cores": cores}
    if len(series) < 2:
        return out
    first, last = series[0], series[-1]
    span = max(last["t"] - first["t"], 1e-9)
    per_core = [sum(col) / len(col) for col in zip(*(r["cpu"] for r in series[1:]), strict=False)]
    out["cpu_per_core_pct"] = [round(x, 1) for x in per_core]
    out["cpu_mean_pct"] = round(sum(per_core) / max(len(per_core), 1), 1)
    out["cpu_max_core_pct"] = round(max(per_core, default=0.0), 1)
    out["ctx_switches_per_s"] = round((last["ctx"] - first["ctx"]) / span, 1)
    reads = last["read_count"] - first["read_count"]
    out["disk_read_mb_s"] = round((last["read_bytes"] - first["read_bytes"]) / span / 1e6, 3)
    out["disk_read_wait_ms"] = round((last["read_time"] - first["read_time"]) / reads, 3) if reads else 0.0
    if first.get("busy_time") is not None and last.get("busy_time") is not None:
        out["disk_busy_pct"] = round(100 * (last["busy_time"] - first["busy_time"]) / 1000 / span, 1)
    cpu = sum(r.get("tasks_cpu", 0.0) for r in series[1:])
    if cpu > TASKS_MIN_CPU:
        out["loader_runq_per_cpu"] = round(sum(r.get("tasks_runq", 0.0) for r in series[1:]) / cpu, 4)
    sm = [r["sm"] for r in series if "sm" in r]
    if sm:
        out["gpu_sm_pct"] = round(sum(sm) / len(sm), 1)
        rx = [r["pcie_rx_kb"] for r in series if "pcie_rx_kb" in r]
        out["pcie_rx_mb_s"] = round(sum(rx) / len(rx) / 1e3, 1) if rx else None
    return out


TASKS_MIN_CPU = 0.05
"""CPU seconds the loader's threads must use before their run-queue ratio is reported."""


class TaskClock:
    """Run-queue and CPU seconds of the loader's threads between two calls of :meth:`sample`.

    The threads are every thread of this process except the main one and those in
    :attr:`skip` (feedline's own), and every thread of every descendant process. A
    thread seen for the first time counts from its start if it began after the
    first sample (a worker started during the run), else from now. Linux only
    (``/proc/<pid>/task/<tid>/schedstat``); elsewhere every sample is ``(0, 0)``.
    """

    def __init__(self) -> None:
        self.skip: set[int] = set()
        self._last: dict[tuple[int, int], tuple[float, float]] = {}
        self._first = True

    def _tasks(self) -> dict[int, list[str]]:
        """This process and its descendants, each with its thread ids, from
        ``/proc/<pid>/task/<tid>/children`` (psutil's walk reads every process on the host:
        ten times slower)."""
        out: dict[int, list[str]] = {}
        todo = [os.getpid()]
        while todo:
            pid = todo.pop()
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            out[pid] = tids
            todo.extend(child_pids(pid, tids))
        return out

    def sample(self) -> tuple[float, float]:
        """(CPU seconds, run-queue seconds) the loader's threads used since the last call."""
        me, cpu, runq = os.getpid(), 0.0, 0.0
        seen: dict[tuple[int, int], tuple[float, float]] = {}
        for pid, tids in self._tasks().items():
            for name in tids:
                tid = int(name)
                if (pid == me and tid == me) or tid in self.skip:
                    continue
                try:
                    with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as fh:
                        parts = fh.read().split()
                    now = (int(parts[0]) / 1e9, int(parts[1]) / 1e9)
                except (OSError, IndexError, ValueError):
                    continue
                seen[(pid, tid)] = now
                before = self._last.get((pid, tid), None if self._first else (0.0, 0.0))
                if before is not None:
                    cpu += max(0.0, now[0] - before[0])
                    runq += max(0.0, now[1] - before[1])
        self._last, self._first = seen, False
        return cpu, runq
