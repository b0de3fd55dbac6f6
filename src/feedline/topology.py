"""Read the host's PCIe / NUMA topology from sysfs: NVIDIA GPUs, NVMe drives, storage of a path.

Every reader takes ``sysfs`` (default ``"/sys"``) so a test can point it at a
directory tree laid out like sysfs. Nothing here needs root, a GPU or CUDA;
NVML (``pynvml``, from the ``nvidia-ml-py`` package) is used only when it is
installed and a driver answers.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

NVIDIA_VENDOR = "0x10de"
_GT_S_TO_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _numa(path: Path) -> int | None:
    """A ``numa_node`` file's value; ``-1`` (no affinity reported) and junk read as ``None``."""
    text = _read(path)
    try:
        node = int(text) if text is not None else -1
    except ValueError:
        return None
    return node if node >= 0 else None


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def link_speed_gts(text: str | None) -> float | None:
    """``"16.0 GT/s PCIe" -> 16.0``; ``None`` for ``Unknown`` or missing."""
    m = re.match(r"\s*([0-9.]+)\s*GT/s", text or "")
    return float(m.group(1)) if m else None


def pcie_gen(speed_gts: float | None) -> int | None:
    """PCIe generation of a per-lane rate: 2.5 GT/s -> 1 ... 64 GT/s -> 6."""
    return _GT_S_TO_GEN.get(speed_gts) if speed_gts is not None else None


@dataclass(frozen=True)
class PcieLink:
    """Negotiated (current) and capable (max) link of a PCIe device."""

    speed_gts: float | None
    width: int | None
    max_speed_gts: float | None
    max_width: int | None

    @property
    def gen(self) -> int | None:
        return pcie_gen(self.speed_gts)

    @property
    def max_gen(self) -> int | None:
        return pcie_gen(self.max_speed_gts)

    def describe(self) -> str:
        """``"Gen4 x16 (max Gen4 x16)"``, with ``?`` for unknown parts."""

        def part(gen: int | None, width: int | None) -> str:
            return f"Gen{gen if gen else '?'} x{width if width else '?'}"

        return f"{part(self.gen, self.width)} (max {part(self.max_gen, self.max_width)})"


def _pcie_link(dev: Path) -> PcieLink:
    return PcieLink(
        speed_gts=link_speed_gts(_read(dev / "current_link_speed")),
        width=_int(_read(dev / "current_link_width")),
        max_speed_gts=link_speed_gts(_read(dev / "max_link_speed")),
        max_width=_int(_read(dev / "max_link_width")),
    )


@dataclass(frozen=True)
class GpuDevice:
    """One NVIDIA GPU as sysfs (and NVML, when present) sees it."""

    address: str
    """PCI address, e.g. ``"0000:3b:00.0"``."""
    numa_node: int | None
    link: PcieLink
    name: str | None = None
    """Product name from NVML; ``None`` without NVML."""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["link"].update(gen=self.link.gen, max_gen=self.link.max_gen)
        return d


@dataclass(frozen=True)
class NvmeDevice:
    """One NVMe controller from ``/sys/class/nvme``."""

    name: str
    address: str | None
    numa_node: int | None
    model: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def find_gpus(sysfs: str | os.PathLike[str] = "/sys") -> list[GpuDevice]:
    """NVIDIA display/3D controllers (vendor 0x10de, class 0x03xxxx) under ``bus/pci/devices``."""
    root = Path(sysfs) / "bus" / "pci" / "devices"
    gpus = []
    for dev in sorted(root.glob("*")) if root.is_dir() else []:
        vendor = (_read(dev / "vendor") or "").lower()
        klass = (_read(dev / "class") or "").lower()
        if vendor == NVIDIA_VENDOR and klass.startswith("0x03"):
            gpus.append(GpuDevice(dev.name, _numa(dev / "numa_node"), _pcie_link(dev)))
    return gpus


def find_nvme(sysfs: str | os.PathLike[str] = "/sys") -> list[NvmeDevice]:
    """NVMe controllers with the NUMA node of their PCI function."""
    root = Path(sysfs) / "class" / "nvme"
    found = []
    for ctrl in sorted(root.glob("*")) if root.is_dir() else []:
        device = ctrl / "device"
        address = device.resolve().name if device.exists() else None
        found.append(
            NvmeDevice(ctrl.name, address, _numa(device / "numa_node"), _read(ctrl / "model"))
        )
    return found


def numa_node_count(sysfs: str | os.PathLike[str] = "/sys") -> int:
    """Number of NUMA nodes (``devices/system/node/nodeN``); 1 when sysfs does not say."""
    root = Path(sysfs) / "devices" / "system" / "node"
    nodes = [p for p in root.glob("node*") if p.name[4:].isdigit()] if root.is_dir() else []
    return max(1, len(nodes))


def parse_cpulist(text: str) -> frozenset[int]:
    """``"0-3,8,10-11" -> {0, 1, 2, 3, 8, 10, 11}`` (the kernel's cpulist format).

    Raises:
        ValueError: the text is not a cpulist.
    """
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        first, last = int(lo), int(hi or lo)
        if first < 0 or last < first or last - first > 65536:
            raise ValueError(f"bad cpulist range {part!r}")
        cpus.update(range(first, last + 1))
    return frozenset(cpus)


def node_cpus(node: int, sysfs: str | os.PathLike[str] = "/sys") -> frozenset[int] | None:
    """The CPUs of NUMA node ``node`` (``devices/system/node/nodeN/cpulist``); ``None`` if unknown."""
    text = _read(Path(sysfs) / "devices" / "system" / "node" / f"node{node}" / "cpulist")
    try:
        return parse_cpulist(text) if text is not None else None
    except ValueError:
        return None


@dataclass(frozen=True)
class StorageLocation:
    """Where the bytes of a path live: the block device and its NUMA node."""

    device: str | None
    """Block device name (``nvme0n1p1``), or ``None`` for tmpfs, overlay, network mounts."""
    numa_node: int | None
    pci_address: str | None


def _walk_to_pci(block: Path, sysfs: Path, depth: int = 0) -> tuple[int | None, str | None]:
    real = block.resolve()
    for p in (real, *real.parents):
        if p == sysfs or p == p.parent:
            break
        if (p / "numa_node").is_file() and re.fullmatch(r"[0-9a-f]{4}:[0-9a-f:.]+", p.name):
            return _numa(p / "numa_node"), p.name
    # device-mapper / md: follow the first underlying device.
    slaves = sorted((real / "slaves").glob("*")) if (real / "slaves").is_dir() else []
    if slaves and depth < 8:
        return _walk_to_pci(sysfs / "class" / "block" / slaves[0].name, sysfs, depth + 1)
    return None, None


def storage_location(path: str | os.PathLike[str], sysfs: str | os.PathLike[str] = "/sys") -> StorageLocation:
    """Find the block device holding ``path`` and the NUMA node of its PCI controller.

    Follows ``<sysfs>/dev/block/MAJOR:MINOR`` for the file system's device,
    walks up to the PCI function, and through ``slaves/`` for dm/md devices.

    Raises:
        FileNotFoundError: ``path`` does not exist.
    """
    st = os.stat(path)
    sys_root = Path(sysfs).resolve()
    link = sys_root / "dev" / "block" / f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    if not link.exists():
        return StorageLocation(None, None, None)
    numa, address = _walk_to_pci(link, sys_root)
    return StorageLocation(link.resolve().name, numa, address)


def _normalise_bus_id(bus_id: str | bytes) -> str:
    text = bus_id.decode() if isinstance(bus_id, bytes) else bus_id
    return text.lower()[-12:]  # "00000000:3B:00.0" -> "0000:3b:00.0"


def nvml_names() -> tuple[dict[str, str], str | None]:
    """GPU product names by PCI address from NVML, and why not when unavailable.

    Imports ``pynvml`` lazily; returns ``({}, reason)`` when it is missing or
    no driver answers. Never raises for a missing driver.
    """
    try:
        import pynvml
    except ImportError:
        return {}, "NVML not installed (pip install nvidia-ml-py)"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        return {}, f"NVML unavailable: {e}"
    try:
        names = {}
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            bus = _normalise_bus_id(pynvml.nvmlDeviceGetPciInfo(handle).busId)
            name = pynvml.nvmlDeviceGetName(handle)
            names[bus] = name.decode() if isinstance(name, bytes) else str(name)
        return names, None
    except pynvml.NVMLError as e:
        return {}, f"NVML query failed: {e}"
    finally:
        pynvml.nvmlShutdown()


__all__ = [
    "GpuDevice",
    "NvmeDevice",
    "PcieLink",
    "StorageLocation",
    "find_gpus",
    "find_nvme",
    "link_speed_gts",
    "node_cpus",
    "numa_node_count",
    "nvml_names",
    "parse_cpulist",
    "pcie_gen",
    "storage_location",
]
