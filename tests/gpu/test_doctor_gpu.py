"""GPU-machine checks of feedline.doctor: the real sysfs/NVML paths on a CUDA host.

Collected only with FEEDLINE_GPU=1 (bench/gpu_check.py). Fails, never skips,
without CUDA.
"""

from __future__ import annotations

import torch

from feedline.doctor import find_gpus, run_doctor
from feedline.topology import nvml_names


def test_cuda_is_present():
    assert torch.cuda.is_available(), "tests/gpu needs a CUDA device"


def test_sysfs_sees_every_cuda_device():
    gpus = find_gpus("/sys")
    # sysfs shows the host's GPUs; CUDA may see a subset (CUDA_VISIBLE_DEVICES).
    assert len(gpus) >= torch.cuda.device_count() >= 1
    for g in gpus:
        assert g.numa_node is None or g.numa_node >= 0
        # A physical or passed-through GPU reports its link; print it into the log.
        print(g.address, g.numa_node, g.link.describe())


def test_doctor_lists_the_gpus_and_never_says_none():
    checks = run_doctor(workers=1)
    gpu_checks = [c for c in checks if c.name.startswith("gpu ")]
    assert gpu_checks, [c.detail for c in checks]
    assert not any(c.detail.startswith("no NVIDIA GPU found") for c in checks)
    for c in gpu_checks:
        assert "PCIe Gen" in c.detail and c.status in ("ok", "warn")


def test_nvml_names_match_the_bus_ids_when_installed():
    assert torch.cuda.is_available(), "tests/gpu needs a CUDA device"
    names, reason = nvml_names()
    if reason is not None:  # pynvml missing: the reason must say how to get it
        assert "nvidia-ml-py" in reason or "NVML" in reason
        return
    addresses = {g.address for g in find_gpus("/sys")}
    assert names and set(names) <= addresses
    cuda_name = torch.cuda.get_device_name(0)
    assert any(cuda_name.split()[-1] in n for n in names.values())
