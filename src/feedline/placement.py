"""Place loader work next to its GPU: workers on the GPU's NUMA node, slots in its memory.

Seed 001 (Q1): on a two-socket host, a worker or a pinned buffer on the wrong
socket sends every byte across the inter-socket link before it reaches PCIe.
:func:`plan_placement` reads the topology from sysfs once and returns a frozen
:class:`Placement`: the CPUs to run on (the GPU's node, intersected with the
CPUs this process may use), or ``None`` with the reason nothing was done.
Workers call :meth:`Placement.apply` when they start; slot memory is first
touched by a thread pinned there (:meth:`Placement.first_touch`), so Linux's
first-touch policy puts its pages on that node.

Stdlib only (a leaf module): the pipeline and the doctor both use it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from feedline import topology
from feedline.errors import ConfigError

PLACEMENTS = ("auto", "none")
T = TypeVar("T")


@dataclass(frozen=True)
class Placement:
    """Where loader work runs. ``cpus is None`` means "left alone", with ``reason`` saying why."""

    cpus: tuple[int, ...] | None
    node: int | None
    reason: str
    gpu: str | None = None
    """PCI address of the target GPU, when one was found."""

    @property
    def active(self) -> bool:
        return self.cpus is not None

    def apply(self) -> None:
        """Pin the calling thread (or process) to :attr:`cpus`; no-op when inactive.

        On Linux ``sched_setaffinity(0, ...)`` applies to the calling thread only,
        so a thread worker calls it from its own thread.
        """
        if self.cpus is not None:
            os.sched_setaffinity(0, self.cpus)

    def first_touch(self, make: Callable[[], T]) -> T:
        """Run ``make`` (an allocation that touches its pages) pinned to :attr:`cpus`.

        The calling thread's affinity is restored afterwards. Without a
        placement ``make`` simply runs.
        """
        if self.cpus is None:
            return make()
        before = os.sched_getaffinity(0)
        os.sched_setaffinity(0, self.cpus)
        try:
            return make()
        finally:
            os.sched_setaffinity(0, before)

    def describe(self) -> str:
        if self.cpus is None:
            return f"not placed: {self.reason}"
        return f"node {self.node}, CPUs {format_cpulist(self.cpus)} ({self.reason})"

    def to_dict(self) -> dict[str, Any]:
        return {"cpus": list(self.cpus) if self.cpus is not None else None, "node": self.node,
                "gpu": self.gpu, "reason": self.reason}


def format_cpulist(cpus: tuple[int, ...] | frozenset[int] | list[int]) -> str:
    """``[0, 1, 2, 3, 8] -> "0-3,8"`` (the kernel's cpulist format)."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def cuda_pci_address(index: int) -> str | None:
    """PCI address (``"0000:3b:00.0"``) of CUDA device ``index`` from torch; ``None`` if unknown."""
    import torch

    props = torch.cuda.get_device_properties(index)
    bus = getattr(props, "pci_bus_id", None)
    dev = getattr(props, "pci_device_id", None)
    dom = getattr(props, "pci_domain_id", 0) or 0
    if bus is None or dev is None:
        return None
    return f"{int(dom):04x}:{int(bus):02x}:{int(dev):02x}.0"


def _device_address(device: Any) -> tuple[str | None, str | None]:
    """(PCI address, reason when there is none) of a ``torch.device``-like ``device``."""
    text = str(device) if device is not None else "cpu"
    if not text.startswith("cuda"):
        return None, f"device is {text}: no GPU to place the workers next to"
    _, _, idx = text.partition(":")
    try:
        if idx:
            index = int(idx)
        else:  # "cuda": the current device, as torch resolves it (not always 0)
            import torch

            index = torch.cuda.current_device()
        address = cuda_pci_address(index)
    except Exception as e:  # no driver, bad index: say so, never fail a loader for placement
        return None, f"could not read the PCI address of {text}: {e}"
    if address is None:
        return None, f"torch does not report the PCI address of {text}; pass gpu_address="
    return address, None


def plan_placement(
    device: Any = None,
    placement: str = "auto",
    *,
    gpu_address: str | None = None,
    sysfs: str | os.PathLike[str] = "/sys",
    allowed: frozenset[int] | set[int] | None = None,
) -> Placement:
    """Decide where loader workers run for a batch bound for ``device``.

    Args:
        device: the loader's target (``"cuda:1"``, a ``torch.device``, ``"cpu"``).
        placement: ``"auto"`` places on a multi-node host; ``"none"`` never does.
        gpu_address: the GPU's PCI address, instead of asking torch (tests, or a
            driver that does not say).
        sysfs: root of sysfs (a fake tree in tests).
        allowed: CPUs this process may use (default: its current affinity).

    Raises:
        ConfigError: ``placement`` is not ``"auto"`` or ``"none"`` (a ``ValueError``).
    """
    if placement not in PLACEMENTS:
        raise ConfigError(f"placement must be one of {PLACEMENTS} or a Placement, got {placement!r}",
                          field="placement")
    if placement == "none":
        return Placement(None, None, "placement='none'")
    address, why = (gpu_address, None) if gpu_address else _device_address(device)
    if address is None:
        return Placement(None, None, why or "no GPU")
    if topology.numa_node_count(sysfs) < 2:
        return Placement(None, None, "single NUMA node: nothing to choose", address)
    gpu = next((g for g in topology.find_gpus(sysfs) if g.address == address.lower()), None)
    if gpu is None:
        return Placement(None, None, f"GPU {address} not found in {sysfs}/bus/pci/devices", address)
    if gpu.numa_node is None:
        return Placement(None, None, f"GPU {address} reports no NUMA node", address)
    node_set = topology.node_cpus(gpu.numa_node, sysfs)
    if not node_set:
        return Placement(None, gpu.numa_node, f"node {gpu.numa_node}'s CPU list is unreadable", address)
    mine = frozenset(allowed) if allowed is not None else frozenset(os.sched_getaffinity(0))
    cpus = tuple(sorted(node_set & mine))
    if not cpus:
        return Placement(None, gpu.numa_node,
                         f"none of node {gpu.numa_node}'s CPUs ({format_cpulist(node_set)}) are "
                         f"allowed to this process ({format_cpulist(mine)})", address)
    return Placement(cpus, gpu.numa_node, f"the NUMA node of GPU {address}", address)


__all__ = ["PLACEMENTS", "Placement", "cuda_pci_address", "format_cpulist", "plan_placement"]
