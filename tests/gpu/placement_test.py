"""GPU-machine check: torch reports the GPU's PCI address and the placement uses the real sysfs.

Collected only with FEEDLINE_GPU=1 (bench/gpu_check.py). Fails, never skips, without CUDA.
"""

from __future__ import annotations

import os

import torch

from feedline.placement import cuda_pci_address, plan_placement
from feedline.topology import find_gpus, node_cpus


def test_the_cuda_device_is_found_in_sysfs_and_placed_or_says_why() -> None:
    assert torch.cuda.is_available(), "this test needs a CUDA device (run it on the GPU box)"
    address = cuda_pci_address(0)
    assert address is not None, "torch should report pci_bus_id / pci_device_id"
    assert address in {g.address for g in find_gpus()}, f"{address} not among sysfs's NVIDIA GPUs"
    p = plan_placement("cuda:0")
    print("placement:", p.describe())
    if p.active:
        assert p.node is not None
        node = node_cpus(p.node)
        assert node is not None and set(p.cpus or ()) <= node
        assert set(p.cpus or ()) <= os.sched_getaffinity(0)
    else:
        assert p.reason
