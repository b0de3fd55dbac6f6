import sys

import pytest

from feedline.doctor import exit_code, find_gpus, run_doctor
from feedline.errors import ConfigError

NAMES = ["shared memory", "locked memory", "cpu cores", "free memory"]


def test_doctor_on_fake_host(fake_sysfs):
    checks = run_doctor(workers=2, batch_bytes=1 << 20, pinned_budget=1 << 20, data=fake_sysfs.data,
                        sysfs=fake_sysfs.root, procfs=fake_sysfs.root / "proc")
    by_name = {c.name: c for c in checks}
    assert [c.name for c in checks[:4]] == NAMES
    assert by_name["gpu 0000:3b:00.0"].status == "ok"
    assert by_name["gpu 0000:b1:00.0"].status == "warn"
    assert by_name["numa placement"].status == "warn"
    assert "0000:b1:00.0 (node 1)" in by_name["numa placement"].detail
    assert "2 GPU(s)" in by_name["cpu cores"].detail  # GPU count comes from the fake sysfs
    assert by_name["nvme"].detail.startswith("nvme0")
    assert exit_code(checks) == 0


def test_doctor_fails_on_an_impossible_pinned_budget(fake_sysfs):
    checks = run_doctor(pinned_budget=1 << 50, sysfs=fake_sysfs.root)
    assert exit_code(checks) == 1
    assert [c.name for c in checks if c.status == "fail"] == ["free memory"]


def test_doctor_on_this_machine():
    checks = run_doctor(data=".")
    names = [c.name for c in checks]
    assert names[:4] == NAMES and names[-4:] == ["nvme", "numa placement", "worker placement", "gds"]
    if find_gpus("/sys"):
        assert any(n.startswith("gpu 0000:") for n in names)
    else:
        gpu = next(c for c in checks if c.name == "gpu")
        assert gpu.detail.startswith("no NVIDIA GPU found")


def test_doctor_does_not_import_torch():
    import subprocess

    code = "import sys, feedline.doctor as d; d.run_doctor(); assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"workers": 0}, "workers"), ({"prefetch": 0}, "prefetch"), ({"gpus": -1}, "gpus"),
     ({"batch_bytes": -1}, "batch_bytes"), ({"data": "/nonexistent/data"}, "data")],
)
def test_bad_arguments(kwargs, field):
    with pytest.raises(ConfigError) as info:
        run_doctor(**kwargs)
    assert info.value.field == field
