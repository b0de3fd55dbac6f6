"""Host resource checks: /dev/shm, locked memory, CPU cores, free memory.

Each check returns a :class:`Check`. The ``check_*`` functions take the
measured numbers as arguments (the ``read_*`` helpers measure them), so every
branch can be tested with real values; :func:`feedline.doctor.run_doctor`
wires the two together.
"""

from __future__ import annotations

import math
import os
import resource
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import psutil

from feedline.cores import cgroup_cpu_limit
from feedline.cores import usable_cores as read_cpu_cores
from feedline.units import format_bytes

Status = Literal["ok", "warn", "fail", "info"]
STATUSES: tuple[Status, ...] = ("ok", "warn", "fail", "info")
MAX_WORKERS_PER_GPU = 8
_SMALL_SHM = 1 << 30  # docker's default is 64 MiB


@dataclass(frozen=True)
class Check:
    """One finding: what was checked, how it went, what was seen, and what to do."""

    name: str
    status: Status
    detail: str
    fix: str | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def recommended_workers(cores: int, gpus: int) -> int:
    """The seed's rule of thumb: ``min(cores / gpus, 8)`` loader workers per GPU, at least 1.

    ``gpus == 0`` (a CPU-only run) counts as one consumer.

    Raises:
        ValueError: ``cores < 1`` or ``gpus < 0``.
    """
    if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
        raise ValueError(f"cores must be an integer >= 1, got {cores!r}")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
        raise ValueError(f"gpus must be an integer >= 0, got {gpus!r}")
    return max(1, min(cores // max(gpus, 1), MAX_WORKERS_PER_GPU))


def cgroup_memory_free(sysfs: str | os.PathLike[str] = "/sys") -> int | None:
    """Bytes left under a cgroup v2 ``memory.max``; ``None`` when there is no limit."""
    cgroup = Path(sysfs) / "fs" / "cgroup"
    try:
        limit = (cgroup / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return max(0, int(limit) - int((cgroup / "memory.current").read_text()))
    except (OSError, ValueError):
        return None  # no cgroup v2 memory limit visible


def read_available_memory(sysfs: str | os.PathLike[str] = "/sys") -> int:
    """Bytes that can still be allocated: psutil's available, capped by a cgroup v2 limit."""
    available = int(psutil.virtual_memory().available)
    cgroup_free = cgroup_memory_free(sysfs)
    return available if cgroup_free is None else min(available, cgroup_free)


def check_shm(
    path: str | os.PathLike[str], workers: int | None, prefetch: int, batch_bytes: int | None
) -> Check:
    """Is ``path`` (``/dev/shm``) big enough for ``workers x prefetch x batch_bytes``?

    Process workers hand batches to the main process through shared memory.
    """
    name = "shared memory"
    try:
        usage = shutil.disk_usage(path)
    except OSError as e:
        return Check(name, "warn", f"{path} unusable: {e.strerror}",
                     "process workers need /dev/shm; use thread workers or mount a tmpfs there")
    have = f"{format_bytes(usage.free)} free of {format_bytes(usage.total)} at {path}"
    if batch_bytes is None or workers is None:
        if usage.total < _SMALL_SHM:
            return Check(name, "warn", f"{have} (small: container default?)",
                         "run docker with --shm-size=8g, or pass --batch-bytes to check exactly")
        return Check(name, "info", f"{have}; pass --workers and --batch-bytes to check the need")
    need = workers * prefetch * batch_bytes
    detail = f"{have}; need {workers} workers x {prefetch} prefetch x {format_bytes(batch_bytes)} = {format_bytes(need)}"
    if usage.free < need:
        return Check(name, "fail", detail,
                     f"grow it (mount -o remount,size={math.ceil(need * 1.5 / 2**30)}G {path}, "
                     "or docker --shm-size), or lower workers, prefetch or batch size")
    if usage.free < 2 * need:
        return Check(name, "warn", detail + " (under 2x headroom)",
                     "leave room for other jobs' shared memory: grow /dev/shm or lower prefetch")
    return Check(name, "ok", detail)


def read_memlock() -> tuple[int, int]:
    """Soft and hard ``RLIMIT_MEMLOCK`` in bytes (``resource.RLIM_INFINITY`` = unlimited)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return soft, hard


def _fmt_limit(value: int) -> str:
    return "unlimited" if value == resource.RLIM_INFINITY else format_bytes(value)


def check_memlock(soft: int, hard: int, pinned_budget: int | None) -> Check:
    """Locked-memory limit (``ulimit -l``) against the pinned budget.

    ``cudaHostAlloc`` is not bound by this limit, but ``mlock``-based pinning,
    GDS buffer registration and RDMA are, so a low limit is a warning.
    """
    name = "locked memory"
    detail = f"ulimit -l soft {_fmt_limit(soft)}, hard {_fmt_limit(hard)}"
    if soft == resource.RLIM_INFINITY:
        return Check(name, "ok", detail)
    if pinned_budget is None:
        return Check(name, "info", detail + "; pass --pinned-budget to check it")
    detail += f"; pinned budget {format_bytes(pinned_budget)}"
    if soft < pinned_budget:
        return Check(name, "warn", detail + " (GDS registration and mlock'd buffers will fail)",
                     "raise it: ulimit -l unlimited, 'memlock' in /etc/security/limits.conf, "
                     "or docker --ulimit memlock=-1")
    return Check(name, "ok", detail)


def check_cores(cores: int, workers: int | None, gpus: int) -> Check:
    """Requested workers per GPU against ``min(cores / gpus, 8)``."""
    name = "cpu cores"
    rec = recommended_workers(cores, gpus)
    per = f"{gpus} GPU(s)" if gpus else "no GPU"
    detail = f"{cores} usable cores, {per}: recommended {rec} workers per GPU (min(cores / gpus, 8))"
    if workers is None:
        return Check(name, "info", detail)
    procs = workers * max(gpus, 1)
    detail += f"; asked {workers} per GPU = {procs} worker processes"
    if procs > cores:
        return Check(name, "warn", detail + " (more workers than cores: context-switch tax)",
                     f"use --workers {rec}")
    if workers > rec:
        return Check(name, "warn", detail + " (past the point of returns)", f"use --workers {rec}")
    return Check(name, "ok", detail)


def check_memory(available: int, pinned_budget: int | None) -> Check:
    """Free memory against the pinned budget: pinned pages can never be swapped out."""
    name = "free memory"
    detail = f"{format_bytes(available)} available"
    if pinned_budget is None:
        return Check(name, "info", detail + "; pass --pinned-budget to check it")
    detail += f", pinned budget {format_bytes(pinned_budget)}"
    if pinned_budget > available:
        return Check(name, "fail", detail + " (the OOM killer will step in)",
                     "lower the pinned budget (fewer slots or smaller batches)")
    if pinned_budget > available // 2:
        return Check(name, "warn", detail + " (over half of what is free)",
                     "leave room for workers and the page cache: lower the pinned budget")
    return Check(name, "ok", detail)


__all__ = [
    "MAX_WORKERS_PER_GPU",
    "STATUSES",
    "Check",
    "Status",
    "cgroup_cpu_limit",
    "cgroup_memory_free",
    "check_cores",
    "check_memlock",
    "check_memory",
    "check_shm",
    "read_available_memory",
    "read_cpu_cores",
    "read_memlock",
    "recommended_workers",
]
