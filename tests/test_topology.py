import os
from pathlib import Path

import pytest

from feedline.doctor import find_gpus, find_nvme, numa_node_count, storage_location
from feedline.doctor.checks import cgroup_cpu_limit, cgroup_memory_free, read_cpu_cores
from feedline.topology import PcieLink, link_speed_gts, pcie_gen


def test_find_gpus_reads_numa_and_links(fake_sysfs):
    gpus = find_gpus(fake_sysfs.root)
    assert [g.address for g in gpus] == ["0000:3b:00.0", "0000:b1:00.0"]  # audio + Intel ignored
    a, b = gpus
    assert a.numa_node == 0 and b.numa_node == 1
    assert a.link == PcieLink(16.0, 16, 16.0, 16) and a.link.gen == 4
    assert b.link.width == 8 and b.link.max_width == 16
    assert a.link.describe() == "Gen4 x16 (max Gen4 x16)"
    d = a.to_dict()
    assert d["link"]["gen"] == 4 and d["numa_node"] == 0 and d["name"] is None


def test_find_nvme_follows_the_device_link(fake_sysfs):
    (nvme,) = find_nvme(fake_sysfs.root)
    assert nvme.name == "nvme0" and nvme.address == "0000:3d:00.0"
    assert nvme.numa_node == 0 and nvme.model == "Samsung SSD 990 PRO 2TB"


def test_storage_location_walks_from_the_path_to_the_pci_function(fake_sysfs):
    loc = storage_location(fake_sysfs.data, fake_sysfs.root)
    assert loc.device == "nvme0n1p1" and loc.numa_node == 0 and loc.pci_address == "0000:3d:00.0"
    # A file inside the folder lives on the same device.
    f = fake_sysfs.data / "shard-000.tar"
    f.write_bytes(b"x")
    assert storage_location(f, fake_sysfs.root) == loc


def test_storage_location_through_device_mapper(fake_sysfs, tmp_path):
    root = fake_sysfs.root
    st = os.stat(fake_sysfs.data)
    link = root / "dev/block" / f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    link.unlink()
    dm = root / "devices/virtual/block/dm-0"
    (dm / "slaves").mkdir(parents=True)
    disk = root / "devices/pci0000:00/0000:00:1d.0/0000:3d:00.0/nvme/nvme0/nvme0n1"
    (dm / "slaves" / "nvme0n1").symlink_to(os.path.relpath(disk, dm / "slaves"))
    (root / "class/block").mkdir(parents=True)
    (root / "class/block/nvme0n1").symlink_to(os.path.relpath(disk, root / "class/block"))
    link.symlink_to(os.path.relpath(dm, link.parent))
    loc = storage_location(fake_sysfs.data, root)
    assert loc.device == "dm-0" and loc.numa_node == 0 and loc.pci_address == "0000:3d:00.0"


def test_path_on_no_block_device(fake_sysfs, tmp_path):
    other = tmp_path / "empty-sys"
    other.mkdir()
    loc = storage_location(fake_sysfs.data, other)
    assert loc.device is None and loc.numa_node is None


def test_missing_path_raises(fake_sysfs):
    with pytest.raises(FileNotFoundError):
        storage_location(fake_sysfs.data / "missing", fake_sysfs.root)


def test_numa_nodes_and_cgroup_limits(fake_sysfs, tmp_path):
    assert numa_node_count(fake_sysfs.root) == 2
    assert numa_node_count(tmp_path / "nowhere") == 1
    assert cgroup_cpu_limit(fake_sysfs.root) == 2
    assert read_cpu_cores(fake_sysfs.root) <= 2
    assert cgroup_memory_free(fake_sysfs.root) == 2 << 30
    (fake_sysfs.root / "fs/cgroup/cpu.max").write_text("max 100000\n")
    (fake_sysfs.root / "fs/cgroup/memory.max").write_text("max\n")
    assert cgroup_cpu_limit(fake_sysfs.root) is None
    assert cgroup_memory_free(fake_sysfs.root) is None
    assert read_cpu_cores(fake_sysfs.root) == len(os.sched_getaffinity(0))


@pytest.mark.parametrize(
    ("text", "speed", "gen"),
    [("2.5 GT/s PCIe", 2.5, 1), ("8.0 GT/s PCIe", 8.0, 3), ("32.0 GT/s PCIe", 32.0, 5),
     ("64 GT/s", 64.0, 6), ("Unknown", None, None), (None, None, None)],
)
def test_link_speed_parsing(text, speed, gen):
    assert link_speed_gts(text) == speed
    assert pcie_gen(speed) == gen


def test_real_sysfs_reads_without_error():
    # The real /sys of whatever machine runs the tests: every GPU found has a
    # PCI address, and every NVMe a controller name.
    for gpu in find_gpus("/sys"):
        assert len(gpu.address) == 12 and gpu.address.count(":") == 2
    for nvme in find_nvme("/sys"):
        assert nvme.name.startswith("nvme")
    assert numa_node_count("/sys") >= 1
    loc = storage_location(Path.cwd(), "/sys")
    assert loc.numa_node is None or loc.numa_node >= 0
