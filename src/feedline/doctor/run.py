"""Run every host check in one call: :func:`run_doctor`."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from feedline import topology as topo
from feedline.doctor import checks as c
from feedline.doctor import hardware as hw
from feedline.errors import ConfigError


def _check_count(name: str, value: int | None, minimum: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}", field=name)


def run_doctor(
    *,
    workers: int | None = None,
    prefetch: int = 2,
    batch_bytes: int | None = None,
    pinned_budget: int | None = None,
    gpus: int | None = None,
    data: str | os.PathLike[str] | None = None,
    sysfs: str | os.PathLike[str] = "/sys",
    procfs: str | os.PathLike[str] = "/proc",
    shm: str | os.PathLike[str] = "/dev/shm",
) -> list[c.Check]:
    """Check the host for a planned loader; returns the findings in a fixed order.

    Args:
        workers: loader workers per GPU; ``None`` skips the comparisons that need it.
        prefetch: batches each worker keeps outstanding.
        batch_bytes: bytes of one collated batch (for the /dev/shm need).
        pinned_budget: bytes of pinned host memory the loader may hold.
        gpus: GPUs the run will use; default: as many as sysfs shows.
        data: a file or folder of the dataset, to check its NUMA placement.
        sysfs, procfs, shm: roots to read (tests point them at fake trees).

    Never raises for a missing GPU, driver or optional library; those are findings.

    Raises:
        ConfigError: a count below its minimum, a negative size, or a ``data``
            path that does not exist.
    """
    _check_count("workers", workers, 1)
    _check_count("prefetch", prefetch, 1)
    _check_count("gpus", gpus, 0)
    _check_count("batch_bytes", batch_bytes, 0)
    _check_count("pinned_budget", pinned_budget, 0)
    if data is not None and not Path(data).exists():
        raise ConfigError(f"{data} does not exist", field="data", fix="pass the dataset's folder")
    found = topo.find_gpus(sysfs)
    gpu_count = len(found) if gpus is None else gpus
    soft, hard = c.read_memlock()
    result = [
        c.check_shm(shm, workers, prefetch, batch_bytes),
        c.check_memlock(soft, hard, pinned_budget),
        c.check_cores(c.read_cpu_cores(sysfs), workers, gpu_count),
        c.check_memory(c.read_available_memory(sysfs), pinned_budget),
    ]
    names, nvml_reason = topo.nvml_names() if found else ({}, None)
    found = [topo.GpuDevice(g.address, g.numa_node, g.link, names.get(g.address)) for g in found]
    result += hw.check_gpus(found, gpus, nvml_reason)
    result.append(hw.check_nvme(topo.find_nvme(sysfs)))
    storage = topo.storage_location(data, sysfs) if data is not None else None
    result.append(hw.check_numa(found, None if data is None else str(data), storage,
                                topo.numa_node_count(sysfs)))
    result.append(hw.check_placement(found, sysfs))
    result.append(hw.check_gds(hw.probe_gds(procfs), bool(found)))
    return result


def exit_code(found: Sequence[c.Check]) -> int:
    """1 when any check failed, else 0."""
    return 1 if any(ch.status == "fail" for ch in found) else 0


__all__ = ["exit_code", "run_doctor"]
