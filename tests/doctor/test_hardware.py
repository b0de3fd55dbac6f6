from feedline.doctor import (
    GdsProbe,
    StorageLocation,
    check_gds,
    check_gpus,
    check_numa,
    check_nvme,
    find_gpus,
    find_nvme,
    probe_gds,
    storage_location,
)
from feedline.topology import GpuDevice, PcieLink


def test_gpu_checks_flag_a_narrow_link(fake_sysfs):
    checks = check_gpus(find_gpus(fake_sysfs.root))
    assert [c.name for c in checks] == ["gpu 0000:3b:00.0", "gpu 0000:b1:00.0"]
    good, narrow = checks
    assert good.status == "ok" and "NUMA node 0, PCIe Gen4 x16 (max Gen4 x16)" in good.detail
    assert narrow.status == "warn" and "x8 (max Gen4 x16)" in narrow.detail and "slot" in (narrow.fix or "")


def test_idle_link_speed_is_only_noted():
    gpu = GpuDevice("0000:01:00.0", None, PcieLink(2.5, 16, 16.0, 16), name="H100")
    (c,) = check_gpus([gpu], nvml_reason=None)
    assert c.status == "ok" and "H100" in c.detail and "idle" in c.detail and "node n/a" in c.detail


def test_no_gpu_is_said_plainly():
    (c,) = check_gpus([])
    assert c.status == "warn" and c.detail.startswith("no NVIDIA GPU found") and c.fix is None
    (asked,) = check_gpus([], requested=2)
    assert "--gpus all" in (asked.fix or "")


def test_fewer_gpus_than_requested_and_nvml_note(fake_sysfs):
    checks = check_gpus(find_gpus(fake_sysfs.root), requested=8, nvml_reason="NVML not installed")
    assert checks[0].name == "gpu count" and "found 2" in checks[0].detail
    assert checks[-1].name == "nvml" and checks[-1].status == "info"


def test_nvme_listing(fake_sysfs):
    c = check_nvme(find_nvme(fake_sysfs.root))
    assert c.status == "info" and "nvme0 (Samsung SSD 990 PRO 2TB, 0000:3d:00.0) node 0" in c.detail
    assert check_nvme([]).detail == "no NVMe devices found"


def test_numa_mismatch_warns_with_the_far_gpu(fake_sysfs):
    gpus = find_gpus(fake_sysfs.root)
    loc = storage_location(fake_sysfs.data, fake_sysfs.root)
    c = check_numa(gpus, str(fake_sysfs.data), loc, 2)
    assert c.status == "warn"
    assert "0000:b1:00.0 (node 1)" in c.detail and "0000:3b:00.0" not in c.detail
    assert "numactl --cpunodebind=0 --membind=0" in (c.fix or "")
    same = check_numa(gpus[:1], str(fake_sysfs.data), loc, 2)
    assert same.status == "ok"


def test_numa_not_applicable_cases(fake_sysfs):
    gpus = find_gpus(fake_sysfs.root)
    assert "pass --data" in check_numa(gpus, None, None, 2).detail
    tmpfs = check_numa(gpus, "/dev/shm/x", StorageLocation(None, None, None), 2)
    assert tmpfs.status == "info" and "no local block device" in tmpfs.detail
    no_node = check_numa(gpus, "/d", StorageLocation("vda", None, None), 1)
    assert no_node.status == "info" and "no NUMA node reported" in no_node.detail
    no_gpu = check_numa([], "/d", StorageLocation("nvme0n1", 0, "0000:3d:00.0"), 2)
    assert no_gpu.status == "info" and "no GPU" in no_gpu.detail


def test_gds_states(tmp_path):
    full = GdsProbe("libcufile.so.0", True, "compat_mode=CompatMode.OFF")
    assert check_gds(full, have_gpu=True).status == "ok"
    compat = check_gds(GdsProbe("libcufile.so.0", False, None), have_gpu=True)
    assert compat.status == "warn" and "nvidia-fs missing" in compat.detail
    none = check_gds(GdsProbe(None, False, None), have_gpu=False)
    assert none.status == "info" and "kvikio not installed" in none.detail
    assert check_gds(full, have_gpu=False).status == "info"


def test_probe_reads_proc_driver(tmp_path):
    (tmp_path / "driver").mkdir()
    assert probe_gds(tmp_path).nvidia_fs is False
    (tmp_path / "driver" / "nvidia-fs").mkdir()
    assert probe_gds(tmp_path).nvidia_fs is True
    real = probe_gds("/proc")  # this machine: whatever it has, the probe answers
    assert isinstance(real.nvidia_fs, bool)


def test_check_placement_names_each_gpus_node(fake_sysfs):
    from feedline.doctor import check_placement

    gpus = find_gpus(fake_sysfs.root)
    ok = check_placement(gpus, fake_sysfs.root, allowed=set(range(8)))
    assert ok.status == "ok"
    assert "0000:3b:00.0: node 0, CPUs 0-3" in ok.detail and "0000:b1:00.0: node 1, CPUs 4-7" in ok.detail
    # This process may run only on node 0: the node-1 GPU's workers cannot be placed.
    half = check_placement(gpus, fake_sysfs.root, allowed={0, 1})
    assert half.status == "warn" and "numactl" in (half.fix or "")
    assert check_placement([], fake_sysfs.root).status == "info"
