"""Topology placement: a fake two-socket sysfs decides the CPUs; apply() pins the calling thread only."""

from __future__ import annotations

import os
import shutil
import threading

import pytest

from feedline.placement import Placement, format_cpulist, plan_placement
from feedline.topology import parse_cpulist


def test_cpulist_round_trip():
    assert parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert format_cpulist([11, 0, 1, 2, 3, 8, 10]) == "0-3,8,10-11"
    with pytest.raises(ValueError):
        parse_cpulist("3-1")


def test_two_socket_host_places_on_the_gpus_node(fake_sysfs):
    far = plan_placement("cuda:1", gpu_address="0000:b1:00.0", sysfs=fake_sysfs.root, allowed=set(range(8)))
    assert far.active and far.node == 1 and far.cpus == (4, 5, 6, 7)
    near = plan_placement("cuda:0", gpu_address="0000:3b:00.0", sysfs=fake_sysfs.root, allowed=set(range(8)))
    assert near.node == 0 and near.cpus == (0, 1, 2, 3)
    assert "node 1, CPUs 4-7" in far.describe()
    assert far.to_dict()["gpu"] == "0000:b1:00.0"


def test_only_cpus_this_process_may_use(fake_sysfs):
    part = plan_placement(gpu_address="0000:b1:00.0", sysfs=fake_sysfs.root, allowed={2, 5, 6})
    assert part.cpus == (5, 6)
    none = plan_placement(gpu_address="0000:b1:00.0", sysfs=fake_sysfs.root, allowed={0, 1})
    assert not none.active and "not" in none.describe() and "4-7" in none.reason


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"placement": "none"}, "placement='none'"),
        ({"device": "cpu"}, "device is cpu"),
        ({"gpu_address": "0000:99:00.0"}, "not found"),
    ],
)
def test_no_op_cases_say_why(fake_sysfs, kwargs, says):
    p = plan_placement(sysfs=fake_sysfs.root, allowed=set(range(8)), **kwargs)
    assert not p.active and says in p.reason


def test_single_node_host_is_a_no_op(fake_sysfs):
    shutil.rmtree(fake_sysfs.root / "devices/system/node/node1")
    p = plan_placement(gpu_address="0000:b1:00.0", sysfs=fake_sysfs.root)
    assert not p.active and "single NUMA node" in p.reason


def test_gpu_without_a_node(fake_sysfs):
    (fake_sysfs.root / "bus/pci/devices/0000:b1:00.0/numa_node").write_text("-1\n")
    p = plan_placement(gpu_address="0000:b1:00.0", sysfs=fake_sysfs.root)
    assert not p.active and "no NUMA node" in p.reason


def test_bad_placement_value():
    with pytest.raises(ValueError, match="placement"):
        plan_placement(placement="socket0")


def test_apply_pins_the_calling_thread_only():
    mine = os.sched_getaffinity(0)
    target = (min(mine),)
    seen: dict[str, set[int]] = {}

    def worker() -> None:
        Placement(target, 0, "test").apply()
        seen["worker"] = os.sched_getaffinity(0)

    t = threading.Thread(target=worker)
    t.start()
    t.join(timeout=10)
    assert seen["worker"] == set(target)
    assert os.sched_getaffinity(0) == mine


def test_first_touch_runs_pinned_and_restores():
    mine = os.sched_getaffinity(0)
    target = (max(mine),)
    inside = Placement(target, 0, "test").first_touch(lambda: os.sched_getaffinity(0))
    assert inside == set(target)
    assert os.sched_getaffinity(0) == mine
    assert Placement(None, None, "off").first_touch(lambda: 7) == 7


def test_diagnose_facts_say_whether_the_process_is_on_the_gpus_node(fake_sysfs):
    # diagnose's facts (feedline.observe.report.placement_facts): a process confined to the
    # GPU's node (numactl) is on it; one confined to the other node has no CPU there
    from feedline.observe.report import placement_facts

    def facts(allowed):
        plan = plan_placement(gpu_address="0000:b1:00.0", sysfs=fake_sysfs.root, allowed=allowed)
        return placement_facts(plan, fake_sysfs.root, frozenset(allowed))

    spread, on, off = facts({0, 1, 4, 5}), facts({4, 5}), facts({0, 1})
    assert spread["cpus"] == [4, 5] and not spread["process_on_node"] and not spread["process_off_node"]
    assert on["process_on_node"] and on["node_cpus"] == [4, 5, 6, 7]
    assert off["cpus"] is None and off["node"] == 1 and off["process_off_node"] and off["process_cpus"] == [0, 1]
    single = placement_facts(plan_placement(gpu_address="0000:b1:00.0", sysfs=fake_sysfs.root, placement="none"))
    assert "process_on_node" not in single  # no node chosen: nothing to compare


def test_diagnose_checks_the_node_of_the_loops_gpu_not_gpu_0():
    # a torchrun rank on cuda:5 was judged by GPU 0's node (plan_placement("cuda:0"))
    import torch

    from feedline.observe._session import _device_text
    from feedline.observe.report import target_gpu

    assert target_gpu(_device_text("cuda:5")) == "cuda:5"
    assert target_gpu(_device_text(2)) == "cuda:2"
    assert target_gpu(_device_text(torch.device("cuda", 1))) == "cuda:1"
    assert target_gpu(_device_text("cuda")) == "cuda"  # torch's current device (set_device(local_rank))
    assert target_gpu(_device_text(torch.device("cuda"))) == "cuda" and target_gpu("") == "cuda"
