"""Shared test configuration.

GPU tests live in tests/gpu and are collected only when FEEDLINE_GPU=1, which
bench/gpu_check.py sets on a machine with CUDA. They are not skipped silently:
the default run does not collect them at all, and the GPU script fails when
CUDA is missing.

Hypothesis runs derandomized by default, so CI sees the same examples on
every run; ``HYPOTHESIS_PROFILE=explore`` draws fresh random examples (run it
locally after touching a property-tested module, and pin what it finds with
``@example`` or a plain regression test).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

collect_ignore = [] if os.environ.get("FEEDLINE_GPU") == "1" else ["gpu"]


import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

settings.register_profile("deterministic", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))


@pytest.fixture(autouse=True)
def _no_leaked_span_sinks():
    """A test that leaves a span sink installed would skew every later test's timings."""
    yield
    from feedline import spans

    leaked = list(spans._sinks)
    if leaked:
        spans._sinks.clear()
        pytest.fail(f"the test left span sinks installed: {leaked}")


# --- a fake sysfs (doctor, topology and placement tests) ---
# A fake sysfs tree laid out like the kernel's: real files and symlinks in tmp_path.
#
# Two NVIDIA GPUs (node 0 at full x16, node 1 trained at x8 of x16), an NVIDIA
# audio function and an Intel bridge (both must be ignored), one NVMe drive on
# node 0 holding the test's data folder (through ``dev/block/MAJ:MIN`` of that
# folder's real device), two NUMA nodes and a cgroup v2 CPU/memory limit.

NVME_PCI = "devices/pci0000:00/0000:00:1d.0/0000:3d:00.0"


def _files(d: Path, **contents: str) -> None:
    d.mkdir(parents=True, exist_ok=True)
    for name, text in contents.items():
        (d / name).write_text(text + "\n")


def _link(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(target, link.parent))


def add_pci(root: Path, parent: str, address: str, **attrs: str) -> Path:
    dev = root / parent / address
    _files(dev, **attrs)
    _link(root / "bus/pci/devices" / address, dev)
    return dev


def gpu_attrs(node: str, speed: str, width: str, max_speed: str = "16.0 GT/s PCIe", max_width: str = "16") -> dict[str, str]:
    return {
        "vendor": "0x10de", "class": "0x030200", "numa_node": node,
        "current_link_speed": speed, "current_link_width": width,
        "max_link_speed": max_speed, "max_link_width": max_width,
    }


@dataclass
class FakeSys:
    root: Path
    data: Path


@pytest.fixture
def fake_sysfs(tmp_path: Path) -> FakeSys:
    root = tmp_path / "sys"
    add_pci(root, "devices/pci0000:3a/0000:3a:00.0", "0000:3b:00.0", **gpu_attrs("0", "16.0 GT/s PCIe", "16"))
    add_pci(root, "devices/pci0000:3a/0000:3a:00.0", "0000:3b:00.1",
            vendor="0x10de", **{"class": "0x040300"}, numa_node="0")
    add_pci(root, "devices/pci0000:b0/0000:b0:00.0", "0000:b1:00.0", **gpu_attrs("1", "16.0 GT/s PCIe", "8"))
    add_pci(root, "devices/pci0000:00", "0000:00:00.0", vendor="0x8086", **{"class": "0x060000"}, numa_node="-1")
    nvme_pci = add_pci(root, "devices/pci0000:00/0000:00:1d.0", "0000:3d:00.0",
                       vendor="0x144d", **{"class": "0x010802"}, numa_node="0")
    ctrl = nvme_pci / "nvme" / "nvme0"
    _files(ctrl, model="Samsung SSD 990 PRO 2TB")
    _link(ctrl / "device", nvme_pci)
    _link(root / "class/nvme/nvme0", ctrl)
    part = ctrl / "nvme0n1" / "nvme0n1p1"
    _files(part, dev="259:1")
    data = tmp_path / "data"
    data.mkdir()
    st = os.stat(data)
    _link(root / "dev/block" / f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}", part)
    for n, cpus in (("node0", "0-3"), ("node1", "4-7")):
        _files(root / "devices/system/node" / n, cpulist=cpus)
    _files(root / "fs/cgroup", **{"cpu.max": "150000 100000", "memory.max": str(8 << 30),
                                  "memory.current": str(6 << 30)})
    return FakeSys(root, data)
