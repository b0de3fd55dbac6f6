"""Host checks before a run: shared memory, locked memory, cores, memory, GPUs, NVMe, NUMA, GDS.

``run_doctor(workers=8, batch_bytes=64 << 20)`` returns a list of
:class:`Check` (name, status ok/warn/fail/info, detail, fix). Needs no GPU and
no torch; reads sysfs (its root is a parameter) and psutil.
"""

from feedline.doctor.checks import (
    Check,
    Status,
    check_cores,
    check_memlock,
    check_memory,
    check_shm,
    recommended_workers,
)
from feedline.doctor.hardware import (
    GdsProbe,
    check_gds,
    check_gpus,
    check_numa,
    check_nvme,
    check_placement,
    probe_gds,
)
from feedline.doctor.run import exit_code, run_doctor
from feedline.topology import (
    GpuDevice,
    NvmeDevice,
    PcieLink,
    StorageLocation,
    find_gpus,
    find_nvme,
    numa_node_count,
    storage_location,
)

__all__ = [
    "Check",
    "GdsProbe",
    "GpuDevice",
    "NvmeDevice",
    "PcieLink",
    "Status",
    "StorageLocation",
    "check_cores",
    "check_gds",
    "check_gpus",
    "check_memlock",
    "check_memory",
    "check_numa",
    "check_nvme",
    "check_placement",
    "check_shm",
    "exit_code",
    "find_gpus",
    "find_nvme",
    "numa_node_count",
    "probe_gds",
    "recommended_workers",
    "run_doctor",
    "storage_location",
]
