import resource
import shutil

import pytest

from feedline.doctor import (
    Check,
    check_cores,
    check_memlock,
    check_memory,
    check_shm,
    recommended_workers,
)
from feedline.doctor.checks import read_available_memory, read_memlock

GiB = 1 << 30


@pytest.mark.parametrize(
    ("cores", "gpus", "expected"),
    [(16, 2, 8), (64, 8, 8), (128, 8, 8), (12, 4, 3), (2, 0, 2), (1, 4, 1), (100, 1, 8), (7, 2, 3)],
)
def test_recommended_workers_rule(cores, gpus, expected):
    assert recommended_workers(cores, gpus) == expected


@pytest.mark.parametrize(("cores", "gpus", "name"), [(0, 1, "cores"), (4, -1, "gpus"), (4.0, 1, "cores")])
def test_recommended_workers_rejects(cores, gpus, name):
    with pytest.raises(ValueError, match=name):
        recommended_workers(cores, gpus)


def test_check_status_is_validated():
    with pytest.raises(ValueError, match="status"):
        Check("x", "bad", "detail")  # type: ignore[arg-type]
    assert Check("x", "ok", "d").to_dict() == {"name": "x", "status": "ok", "detail": "d", "fix": None}


def test_shm_against_workers_prefetch_batch(tmp_path):
    free = shutil.disk_usage(tmp_path).free
    assert check_shm(tmp_path, None, 2, None).status in ("info", "warn")
    ok = check_shm(tmp_path, 2, 2, free // 40)  # need free / 10
    assert ok.status == "ok" and "2 workers x 2 prefetch" in ok.detail
    warn = check_shm(tmp_path, 1, 1, int(free * 0.75))
    assert warn.status == "warn" and "headroom" in warn.detail
    fail = check_shm(tmp_path, 8, 4, free)
    assert fail.status == "fail" and "shm-size" in (fail.fix or "")


def test_shm_missing():
    c = check_shm("/nonexistent/shm", 4, 2, 1 << 20)
    assert c.status == "warn" and "thread workers" in (c.fix or "")


def test_memlock_branches():
    inf = resource.RLIM_INFINITY
    assert check_memlock(inf, inf, 64 * GiB).status == "ok"
    assert "unlimited" in check_memlock(inf, inf, None).detail
    assert check_memlock(8 << 20, 8 << 20, None).status == "info"
    low = check_memlock(8 << 20, 8 << 20, GiB)
    assert low.status == "warn" and "memlock" in (low.fix or "")
    assert check_memlock(2 * GiB, 2 * GiB, GiB).status == "ok"
    soft, hard = read_memlock()  # the real limit of this process
    assert check_memlock(soft, hard, None).status in ("ok", "info")


def test_cores_branches():
    assert check_cores(16, None, 2).status == "info"
    ok = check_cores(16, 8, 2)
    assert ok.status == "ok" and "16 worker processes" in ok.detail
    over = check_cores(16, 16, 2)
    assert over.status == "warn" and over.fix == "use --workers 8"
    past = check_cores(64, 12, 2)  # 24 processes fit on 64 cores, but > 8 per GPU
    assert past.status == "warn" and past.fix == "use --workers 8"
    assert "no GPU" in check_cores(2, 2, 0).detail


def test_memory_branches():
    assert check_memory(10 * GiB, None).status == "info"
    assert check_memory(10 * GiB, 2 * GiB).status == "ok"
    assert check_memory(10 * GiB, 6 * GiB).status == "warn"
    fail = check_memory(10 * GiB, 11 * GiB)
    assert fail.status == "fail" and "pinned budget" in (fail.fix or "")
    real = read_available_memory("/sys")
    assert real > 0


def test_cgroup_memory_caps_available(fake_sysfs):
    assert read_available_memory(fake_sysfs.root) <= 2 << 30
