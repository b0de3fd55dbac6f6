"""Loader(placement=...): workers run on the placement's CPUs (threads and processes); the
consumer's thread is left alone; stats say what was chosen and why."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

import feedline
from feedline.placement import Placement


class Affinity:
    """A map-style dataset; the transform records the CPUs the worker may run on."""

    def __len__(self) -> int:
        return 32

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"x": np.full(4, i, dtype=np.float32)}


def record_affinity(sample: dict[str, Any]) -> dict[str, Any]:
    cpus = sorted(os.sched_getaffinity(0))
    return {**sample, "cpus": np.array([cpus[0], len(cpus)], dtype=np.int64)}


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_workers_run_on_the_placed_cpus(worker_type):
    mine = os.sched_getaffinity(0)
    cpu = max(mine)
    place = Placement((cpu,), 0, "test")
    with feedline.Loader(Affinity(), batch_size=8, workers=2, worker_type=worker_type,
                         transform=record_affinity, placement=place, shuffle=False) as loader:
        seen = {tuple(row) for batch in loader for row in batch["cpus"].tolist()}
        assert loader.stats["placement"]["cpus"] == [cpu]
    assert seen == {(cpu, 1)}
    assert os.sched_getaffinity(0) == mine  # the consumer's thread is untouched


def test_cpu_device_is_not_placed_and_says_why():
    with feedline.Loader(Affinity(), batch_size=8, workers=1, transform=record_affinity) as loader:
        next(iter(loader))
        info = loader.stats["placement"]
    assert info["cpus"] is None and "device is cpu" in info["reason"]


def test_bad_placement_is_an_argument_error():
    with pytest.raises(ValueError, match="placement"):
        feedline.Loader(Affinity(), batch_size=8, placement="socket1")


class _Touches(Placement):
    """The real placement, noting the CPUs each first-touched allocation ran on."""

    def first_touch(self, make):  # type: ignore[override]
        return super().first_touch(lambda: (TOUCHED.append(sorted(os.sched_getaffinity(0))), make())[1])


TOUCHED: list[list[int]] = []


@pytest.mark.timeout(60)
def test_batch_slots_are_first_touched_on_the_placed_cpus():
    # the pinned slots of a GPU loader go through the same allocator (placed_allocator):
    # first touched by a thread on the GPU node's CPUs, so Linux puts their pages there
    TOUCHED.clear()
    mine = os.sched_getaffinity(0)
    cpu = min(mine)
    with feedline.Loader(Affinity(), batch_size=8, workers=1, placement=_Touches((cpu,), 0, "test"),
                         shuffle=False) as loader:
        n = sum(1 for _ in loader)
    assert n == 4 and TOUCHED and all(cpus == [cpu] for cpus in TOUCHED)
    assert os.sched_getaffinity(0) == mine  # restored after each allocation
