"""Is this host too busy for a fair before/after comparison?

A speedup measured while the loader's threads, the training step and other
programs fight over too few cores measures the fight, not the loader. This
module takes cheap snapshots of the kernel's own counters before and after a
measured run and says whether tasks were waiting for a core:

- the 1-minute load average against the usable cores, before the run (were
  other programs already keeping the machine busy?);
- CPU pressure (``/proc/pressure/cpu``, "some": the share of wall time in
  which at least one runnable task waited for a core), during the run;
- the run-queue delay of the cores this process may use (``/proc/schedstat``),
  as waiting tasks per core, during the run;
- the share of their runnable time this process's own threads spent waiting
  for a core (``/proc/self/task/*/schedstat``), during the run.

Each source is optional (containers hide some of them); what is missing is
``None`` and is not used. Linux only; elsewhere only the load average is read.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from feedline.cores import usable_cores

#: More runnable tasks than cores on average before the run: someone else is busy.
LOAD_PER_CORE = 1.0
#: At least one task waited for a core this share of the run's wall time.
PRESSURE_SOME = 0.5
#: Tasks waiting in the run queue, per usable core, on average during the run.
RUNQUEUE_PER_CORE = 0.5
#: This process's threads waited this share of their runnable time.
OWN_WAIT_SHARE = 0.25


@dataclass(frozen=True)
class Snapshot:
    """Kernel counters at one instant (``None``: not readable here)."""

    wall_ns: int
    loadavg: float | None
    pressure_some_us: int | None
    runqueue_wait_ns: int | None
    own: dict[int, tuple[int, int]] = field(default_factory=dict)  # tid -> (cpu ns, wait ns)


@dataclass(frozen=True)
class HostLoad:
    """What :func:`assess` found over one measured window."""

    cores: int
    seconds: float
    load_before: float | None
    pressure_some: float | None
    runqueue_per_core: float | None
    own_wait_share: float | None
    contended: bool
    reasons: list[str]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able fields."""
        return asdict(self)


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="ascii", errors="replace")
    except OSError:
        return None


def _pressure_some_us(text: str | None) -> int | None:
    for line in (text or "").splitlines():
        if line.startswith("some "):
            for item in line.split():
                if item.startswith("total="):
                    return int(item[6:])
    return None


def _runqueue_wait_ns(text: str | None, cpus: set[int]) -> int | None:
    # "cpuN yld_count legacy sched_count sched_goidle ttwu ttwu_local rq_cpu_time run_delay pcount"
    total, seen = 0, False
    for line in (text or "").splitlines():
        parts = line.split()
        if (len(parts) >= 9 and parts[0].startswith("cpu") and parts[0][3:].isdigit()
                and int(parts[0][3:]) in cpus):
            total += int(parts[8])
            seen = True
    return total if seen else None


def _own_tasks() -> dict[int, tuple[int, int]]:
    tasks: dict[int, tuple[int, int]] = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return tasks
    for tid in tids:
        fields = (_read(f"/proc/self/task/{tid}/schedstat") or "").split()
        if len(fields) >= 2 and tid.isdigit():
            tasks[int(tid)] = (int(fields[0]), int(fields[1]))
    return tasks


def _cpus() -> set[int]:
    if hasattr(os, "sched_getaffinity"):
        return set(os.sched_getaffinity(0))
    return set(range(os.cpu_count() or 1))


def snapshot() -> Snapshot:
    """Read the counters now (a few small /proc files; well under a millisecond)."""
    try:
        load: float | None = os.getloadavg()[0]
    except (OSError, AttributeError):
        load = None
    return Snapshot(
        wall_ns=time.monotonic_ns(),
        loadavg=load,
        pressure_some_us=_pressure_some_us(_read("/proc/pressure/cpu")),
        runqueue_wait_ns=_runqueue_wait_ns(_read("/proc/schedstat"), _cpus()),
        own=_own_tasks(),
    )


def _own_share(before: Snapshot, after: Snapshot) -> float | None:
    cpu = wait = 0
    for tid, (c1, w1) in after.own.items():
        c0, w0 = before.own.get(tid, (0, 0))  # a thread born during the window counts whole
        cpu, wait = cpu + max(0, c1 - c0), wait + max(0, w1 - w0)
    return wait / (cpu + wait) if cpu + wait > 0 else None


def assess(before: Snapshot, after: Snapshot, cores: int | None = None) -> HostLoad:
    """Compare two snapshots around a measured run; ``cores`` defaults to the usable cores."""
    cores = max(1, cores if cores is not None else usable_cores())
    wall = max(1, after.wall_ns - before.wall_ns)
    pressure = runqueue = None
    if before.pressure_some_us is not None and after.pressure_some_us is not None:
        pressure = min(1.0, max(0.0, (after.pressure_some_us - before.pressure_some_us) * 1e3 / wall))
    if before.runqueue_wait_ns is not None and after.runqueue_wait_ns is not None:
        runqueue = max(0.0, (after.runqueue_wait_ns - before.runqueue_wait_ns) / wall / cores)
    own = _own_share(before, after)
    reasons = []
    if before.loadavg is not None and before.loadavg > LOAD_PER_CORE * cores:
        reasons.append(f"load average {before.loadavg:.1f} on {cores} core(s) before the run")
    if pressure is not None and pressure > PRESSURE_SOME:
        reasons.append(f"some task waited for a core {pressure:.0%} of the time (CPU pressure)")
    if runqueue is not None and runqueue > RUNQUEUE_PER_CORE:
        reasons.append(f"{runqueue:.1f} task(s) per core waiting in the run queue on average")
    if own is not None and own > OWN_WAIT_SHARE:
        reasons.append(f"this process's threads waited for a core {own:.0%} of their "
                       "runnable time (run-queue delay)")
    return HostLoad(cores=cores, seconds=wall / 1e9, load_before=before.loadavg,
                    pressure_some=pressure, runqueue_per_core=runqueue, own_wait_share=own,
                    contended=bool(reasons), reasons=reasons)
