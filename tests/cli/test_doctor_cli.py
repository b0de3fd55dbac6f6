import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from feedline.cli.main import main
from feedline.doctor import find_gpus

FEEDLINE = Path(sys.executable).parent / "feedline"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(FEEDLINE), "doctor", *args], capture_output=True, text=True, timeout=60)


def test_doctor_table_on_this_machine():
    proc = run_cli()
    assert proc.returncode == 0, proc.stderr  # nothing is planned, so nothing can fail
    out = proc.stdout
    for name in ("shared memory", "locked memory", "cpu cores", "free memory", "nvme", "gds"):
        assert name in out
    if not find_gpus("/sys"):
        assert "no NVIDIA GPU found" in out
    assert " fail" in out.splitlines()[-1]  # the summary line


def test_doctor_json_in_process(capsys):
    main(["doctor", "--workers", "1", "--batch-bytes", "1MiB", "--data", ".", "--json", "-"])
    data = json.loads(capsys.readouterr().out)
    assert data["exit_code"] == 0
    by_name = {c["name"]: c for c in data["checks"]}
    assert by_name["shared memory"]["status"] in ("ok", "warn")
    assert "1 workers x 2 prefetch x 1.0 MiB" in by_name["shared memory"]["detail"]
    assert all(set(c) == {"name", "status", "detail", "fix"} for c in data["checks"])


def test_doctor_exit_1_when_a_check_fails():
    proc = run_cli("--pinned-budget", "1000TiB", "--json", "-")
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    assert data["exit_code"] == 1
    assert [c["name"] for c in data["checks"] if c["status"] == "fail"] == ["free memory"]


def test_doctor_reads_a_given_sysfs(tmp_path, capsys):
    gpu = tmp_path / "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"
    gpu.mkdir(parents=True)
    for name, text in {"vendor": "0x10de", "class": "0x030200", "numa_node": "1",
                       "current_link_speed": "32.0 GT/s PCIe", "current_link_width": "16",
                       "max_link_speed": "32.0 GT/s PCIe", "max_link_width": "16"}.items():
        (gpu / name).write_text(text + "\n")
    (tmp_path / "sys/bus/pci/devices").mkdir(parents=True)
    os.symlink(gpu, tmp_path / "sys/bus/pci/devices/0000:01:00.0")
    main(["doctor", "--sysfs", str(tmp_path / "sys"), "--json", "-"])
    checks = json.loads(capsys.readouterr().out)["checks"]
    (g,) = [c for c in checks if c["name"].startswith("gpu ")]
    assert g["name"] == "gpu 0000:01:00.0" and "NUMA node 1, PCIe Gen5 x16" in g["detail"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [(["--workers", "0"], "workers"), (["--batch-bytes", "12parsecs"], "--batch-bytes"),
     (["--data", "/nonexistent/dataset"], "does not exist"), (["--gpus", "-1"], "gpus")],
)
def test_doctor_bad_arguments(args, needle, capsys):
    with pytest.raises(SystemExit) as info:
        main(["doctor", *args])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err
