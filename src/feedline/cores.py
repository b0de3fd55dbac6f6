"""How many CPU cores this process may use: its affinity, capped by a cgroup v2 quota.

A container limited to 4 CPUs on a 64-core node still sees 64 cores in its
affinity mask; the quota in ``cpu.max`` is what it can really use. Shared by
the loader (its default worker count) and ``feedline doctor``; stdlib only.
"""

from __future__ import annotations

import math
import os
from pathlib import Path


def cgroup_cpu_limit(sysfs: str | os.PathLike[str] = "/sys") -> int | None:
    """Whole cores allowed by a cgroup v2 ``cpu.max`` quota; ``None`` when there is none."""
    try:
        quota, period = (Path(sysfs) / "fs" / "cgroup" / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else max(1, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        return None  # no cgroup v2 quota visible


def usable_cores(sysfs: str | os.PathLike[str] = "/sys") -> int:
    """Cores this process may use: its CPU affinity, capped by a cgroup v2 ``cpu.max`` quota."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = cgroup_cpu_limit(sysfs)
    return cores if quota is None else min(cores, quota)
