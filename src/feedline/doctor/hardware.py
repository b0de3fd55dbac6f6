"""Device checks: GPUs and their PCIe links, NVMe drives, NUMA placement, GDS availability.

The ``check_*`` functions take what :mod:`feedline.doctor.topology` read, so a
test can feed them a fake sysfs tree; :func:`probe_gds` looks at the real
libraries and ``/proc`` (its root is a parameter too).
"""

from __future__ import annotations

import ctypes.util
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from feedline.doctor.checks import Check
from feedline.topology import GpuDevice, NvmeDevice, StorageLocation


def _node(n: int | None) -> str:
    return "n/a" if n is None else str(n)


def check_gpus(
    gpus: list[GpuDevice], requested: int | None = None, nvml_reason: str | None = None
) -> list[Check]:
    """One check per GPU (NUMA node, PCIe link); a plain "no GPU" finding when there is none.

    A link narrower than the card supports is a warning (reseat or move it); a
    slower link is only noted, since idle GPUs drop their link speed.
    """
    if not gpus:
        detail = "no NVIDIA GPU found (no PCI device with vendor 0x10de, class 0x03): "
        detail += "batches stay on the CPU transfer engine"
        fix = "add a GPU or pass it into the container (docker --gpus all)" if requested else None
        return [Check("gpu", "warn", detail, fix)]
    checks = []
    if requested is not None and requested > len(gpus):
        checks.append(Check("gpu count", "warn", f"asked for {requested} GPUs, found {len(gpus)}",
                            "check CUDA_VISIBLE_DEVICES and the container's device list"))
    for gpu in gpus:
        link = gpu.link
        detail = f"{gpu.name or 'NVIDIA GPU'}, NUMA node {_node(gpu.numa_node)}, PCIe {link.describe()}"
        if link.width and link.max_width and link.width < link.max_width:
            checks.append(Check(f"gpu {gpu.address}", "warn", detail + ": link narrower than the card",
                                "reseat the card or move it to a full-width slot"))
            continue
        if link.speed_gts and link.max_speed_gts and link.speed_gts < link.max_speed_gts:
            detail += " (speed below max: normal while idle, recheck under load)"
        checks.append(Check(f"gpu {gpu.address}", "ok", detail))
    if nvml_reason:
        checks.append(Check("nvml", "info", nvml_reason))
    return checks


def check_nvme(devices: list[NvmeDevice]) -> Check:
    """The NVMe controllers and their NUMA nodes (information only)."""
    if not devices:
        return Check("nvme", "info", "no NVMe devices found")
    parts = [
        f"{d.name} ({d.model or 'unknown model'}, {d.address or '?'}) node {_node(d.numa_node)}"
        for d in devices
    ]
    return Check("nvme", "info", "; ".join(parts))


def check_numa(
    gpus: list[GpuDevice], data: str | None, storage: StorageLocation | None, numa_nodes: int
) -> Check:
    """Warn when the storage holding ``data`` and a GPU sit on different NUMA nodes.

    Cross-node reads go over the socket interconnect (UPI / Infinity Fabric)
    and, with GDS, lose peer-to-peer DMA.
    """
    name = "numa placement"
    head = f"{numa_nodes} NUMA node(s)"
    if data is None or storage is None:
        return Check(name, "info", head + "; pass --data PATH to check the data's placement")
    if storage.device is None:
        return Check(name, "info", f"{head}; {data} is on no local block device "
                     "(tmpfs, overlay or network): placement not checked")
    where = f"{data} on {storage.device} (node {_node(storage.numa_node)})"
    if storage.numa_node is None:
        return Check(name, "info", f"{head}; {where}: no NUMA node reported")
    far = [g for g in gpus if g.numa_node is not None and g.numa_node != storage.numa_node]
    if not gpus:
        return Check(name, "info", f"{head}; {where}; no GPU to compare")
    if far:
        listed = ", ".join(f"{g.address} (node {g.numa_node})" for g in far)
        return Check(
            name, "warn", f"{where}; GPUs on another node: {listed}",
            f"use GPUs on node {storage.numa_node} and run the loader there "
            f"(numactl --cpunodebind={storage.numa_node} --membind={storage.numa_node}), "
            "or move the data to an NVMe on the GPUs' node",
        )
    return Check(name, "ok", f"{where}; every GPU on the same node (or none reported)")


def check_placement(
    gpus: list[GpuDevice], sysfs: str | os.PathLike[str], allowed: set[int] | None = None
) -> Check:
    """Where ``Loader(placement="auto")`` runs the workers of each GPU (seed 001, Q1).

    ``allowed``: the CPUs this process may use (default: its affinity).
    """
    from feedline.placement import plan_placement

    name = "worker placement"
    if not gpus:
        return Check(name, "info", "no GPU: workers are not placed")
    plans = [(g, plan_placement(gpu_address=g.address, sysfs=sysfs, allowed=allowed)) for g in gpus]
    if all(not p.active and "single NUMA node" in p.reason for _, p in plans):
        return Check(name, "info", plans[0][1].reason)
    parts = [f"{g.address}: {p.describe()}" for g, p in plans]
    missed = [g.address for g, p in plans if not p.active]
    if missed:
        return Check(name, "warn", "; ".join(parts),
                     "run the loader for these GPUs with numactl --cpunodebind=<their node>, "
                     "or widen this process's CPU affinity")
    return Check(name, "ok", "; ".join(parts) + " (Loader placement='auto')")


@dataclass(frozen=True)
class GdsProbe:
    """What the host offers for GPUDirect Storage."""

    libcufile: str | None
    """The cuFile library found by the loader, or ``None``."""
    nvidia_fs: bool
    """The nvidia-fs kernel driver is loaded (``/proc/driver/nvidia-fs``)."""
    kvikio: str | None
    """``None`` if KvikIO is not installed, else its compat-mode setting or an import error."""


def _kvikio_state() -> str | None:
    if importlib.util.find_spec("kvikio") is None:
        return None
    try:
        import kvikio.defaults as defaults
    except Exception as e:  # a broken install (missing CUDA libs) is a finding, not a crash
        return f"import failed: {type(e).__name__}: {e}"
    getter = getattr(defaults, "compat_mode", None)
    if callable(getter):
        return f"compat_mode={getter()}"
    get = getattr(defaults, "get", None)
    return f"compat_mode={get('compat_mode')}" if callable(get) else "compat_mode unknown"


def probe_gds(procfs: str | os.PathLike[str] = "/proc") -> GdsProbe:
    """Look for libcufile, the nvidia-fs driver and KvikIO (imported only if installed)."""
    return GdsProbe(
        libcufile=ctypes.util.find_library("cufile"),
        nvidia_fs=(Path(procfs) / "driver" / "nvidia-fs").exists(),
        kvikio=_kvikio_state(),
    )


def check_gds(probe: GdsProbe, have_gpu: bool) -> Check:
    """GDS is usable with libcufile and nvidia-fs; with only one, cuFile runs in compat mode."""
    parts = [
        f"libcufile {probe.libcufile or 'missing'}",
        f"nvidia-fs {'loaded' if probe.nvidia_fs else 'missing'}",
        f"kvikio {probe.kvikio or 'not installed'}",
    ]
    detail = ", ".join(parts)
    if probe.libcufile and probe.nvidia_fs and have_gpu:
        return Check("gds", "ok", "GPUDirect Storage available: " + detail)
    if (probe.libcufile or probe.kvikio) and have_gpu:
        return Check("gds", "warn", "GDS in compatibility mode (reads bounce through host memory): "
                     + detail, "install NVIDIA GDS and load nvidia-fs (modprobe nvidia_fs)")
    return Check("gds", "info", "GDS not available, io='auto' uses POSIX reads: " + detail)


__all__ = ["GdsProbe", "check_gds", "check_gpus", "check_numa", "check_nvme", "check_placement", "probe_gds"]
