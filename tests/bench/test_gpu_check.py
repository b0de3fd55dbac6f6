"""bench/gpu_check.py: never passes silently without CUDA, and its plumbing (timeouts that stop a
step with its children, a summary rewritten after every step, the budget, the dry run) works on
CPU, so the one GPU run it gets runs clean."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import gpu_check  # noqa: E402


def _run(*args: str, timeout: float = 100) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "bench/gpu_check.py", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def _gone(pid: int, within: float = 10.0) -> bool:
    """Whether ``pid`` has exited (or is a zombie) before ``within`` seconds pass."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)  # polling an exit, not ordering two threads
    return False


def test_without_cuda_it_fails_loudly(tmp_path):
    if torch.cuda.is_available():  # on a GPU machine the real run is the test
        return
    assert gpu_check.main(["--out", str(tmp_path)]) == 2
    summary = json.loads((tmp_path / "gpu_check.json").read_text())
    assert summary["env"]["cuda_available"] is False and "did not run" in summary["error"]
    assert summary["steps"] == {}


@pytest.mark.slow  # a fault test of the runner (11 s on 2 cores); the dry run below is the default smoke test
@pytest.mark.timeout(120)
def test_a_crash_of_the_runner_keeps_the_steps_done_and_a_hung_step_dies_with_its_children(tmp_path):
    """Step 1 writes a result, step 2 fails, step 3 hangs with a child process (stopped at its
    timeout, child included), step 4 SIGKILLs the runner itself: steps 1-3 are in the summary."""
    child_pid = tmp_path / "child.pid"
    hang = ("import subprocess, sys, time\n"
            "c = subprocess.Popen([sys.executable, '-c', 'import time\\nwhile True: time.sleep(1)'])\n"
            f"open({str(child_pid)!r}, 'w').write(str(c.pid))\n"
            "while True: time.sleep(1)\n")
    plan = [
        {"name": "one", "argv": ["{python}", "-c", "import json, sys; json.dump({'rows': [{'name': 'a', "
                                 "'samples_per_s': 123.0}]}, open(sys.argv[1], 'w'))", "{json}"]},
        {"name": "two", "argv": ["{python}", "-c", "print('about to fail'); raise SystemExit(3)"]},
        {"name": "three", "argv": ["{python}", "-c", hang], "timeout": 1.5},
        {"name": "four", "argv": ["{python}", "-c", "import os, signal; os.kill(os.getppid(), signal.SIGKILL)"]},
        {"name": "five", "argv": ["{python}", "-c", "pass"]},
    ]
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    out = tmp_path / "out"
    run = _run("--dry-run", "--skip-preflight", "--plan-file", str(tmp_path / "plan.json"), "--out", str(out),
               "--scratch", str(tmp_path / "scratch"))
    assert run.returncode == -9, run.stderr
    steps = json.loads((out / "gpu_check.json").read_text())["steps"]
    assert list(steps) == ["one", "two", "three"]
    assert steps["one"]["status"] == "ok" and "samples_per_s=123" in steps["one"]["headline"]
    assert steps["one"]["result"]["rows"][0]["samples_per_s"] == 123.0
    assert steps["two"]["status"] == "rc 3" and steps["three"]["status"] == "timeout"
    assert _gone(int(child_pid.read_text())), "the hung step's child outlived its timeout"
    log = (out / "gpu_check.log").read_text()
    assert "about to fail" in log and "three: stopped after 1.5 s" in log
    assert not (out / ".gpu_check.json.tmp").exists()


def test_the_budget_stops_starting_steps_and_the_table_says_so(tmp_path, capsys):
    (tmp_path / "plan.json").write_text(json.dumps([{"name": "late", "argv": ["{python}", "-c", "pass"]}]))
    rc = gpu_check.main(["--dry-run", "--skip-preflight", "--plan-file", str(tmp_path / "plan.json"),
                         "--out", str(tmp_path), "--scratch", str(tmp_path / "scratch"),
                         "--budget", str(gpu_check.MIN_STEP_S - 1)])
    assert rc == 1
    assert json.loads((tmp_path / "gpu_check.json").read_text())["steps"]["late"]["status"] == "not run"
    assert "budget was spent" in capsys.readouterr().out.splitlines()[-1]


def test_an_unknown_only_name_is_a_usage_error_before_any_work(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        gpu_check.main(["--dry-run", "--only", "tests,nonesuch", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "nonesuch" in err and "gpu_decode" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.timeout(180)
def test_dry_run_collects_every_gpu_test(tmp_path):
    """Every GPU test module imports on CPU (collect-only: the quick step and the slow one);
    the benches' command lines are parsed by the slow full dry run below."""
    assert gpu_check.main(["--dry-run", "--only", "tests,tests_slow", "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "gpu_check.json").read_text())
    steps = summary["steps"]
    assert steps["tests"]["collected"] >= 25 and steps["tests_slow"]["collected"] >= 5
    assert "torch" in summary["env"] and "kvikio" in summary["env"]["imports"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "gpu_check.json", "gpu_check.log", "gpu_tests.xml", "gpu_tests_slow.xml"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_full_dry_run_parses_every_bench_command_line(tmp_path):
    run = _run("--dry-run", "--out", str(tmp_path), timeout=290)
    assert run.returncode == 0, run.stdout + run.stderr
    steps = json.loads((tmp_path / "gpu_check.json").read_text())["steps"]
    assert set(steps) == {"tests", "tests_slow"} | {b[0] for b in gpu_check.GPU_BENCHES}
    assert all(s["status"] == "ok" for s in steps.values())


def test_test_counts_come_from_junit_or_else_from_the_verbose_log(tmp_path):
    xml = tmp_path / "t.xml"
    xml.write_text('<testsuites><testsuite><testcase classname="a" name="ok"/>'
                   '<testcase classname="a" name="bad"><failure message="assert 1 == 2">x</failure>'
                   '</testcase><testcase classname="a" name="s"><skipped/></testcase></testsuite></testsuites>')
    counts = gpu_check.junit_counts(xml)
    assert (counts["passed"], counts["failed"], counts["skipped"]) == (1, 1, 1)
    assert counts["failures"] == {"a::bad": "assert 1 == 2"}
    assert "error" in gpu_check.junit_counts(tmp_path / "missing.xml")
    log = ("tests/gpu/x_test.py::test_a PASSED                      [ 33%]\n"
           "tests/gpu/x_test.py::test_b[gds] FAILED                 [ 66%]\n"
           "tests/gpu/x_test.py::test_c ERROR\n"
           "FAILED tests/gpu/x_test.py::test_b[gds] - AssertionError\n")
    v = gpu_check.verbose_counts(log)
    assert (v["passed"], v["failed"], v["errors"]) == (1, 1, 1)
    assert set(v["failures"]) == {"tests/gpu/x_test.py::test_b[gds]", "tests/gpu/x_test.py::test_c"}


def _wheel(folder: Path, name: str, body: str) -> None:
    """A minimal pure-Python wheel, written by hand (what bench/gpu_wheels.sh downloads, in small)."""
    import zipfile

    info = f"{name}-0.1.dist-info"
    files = {f"{name}.py": body, f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{k},,\n" for k in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(folder / f"{name}-0.1-py3-none-any.whl", "w") as z:
        for k, v in files.items():
            z.writestr(k, v)


@pytest.mark.timeout(120)
def test_wheels_install_into_a_private_site_without_network_and_reach_the_steps(tmp_path):
    """--wheels: pip --no-index --target, then the steps import the packages (PYTHONPATH)."""
    with open(os.devnull, "w") as log:
        site, info = gpu_check.install_wheels(tmp_path / "none", log, tmp_path)
        assert site is None and "no wheels" in info["error"]
        (tmp_path / "whl").mkdir()
        _wheel(tmp_path / "whl", "gpucheckprobe", "VALUE = 42\n")
        site, info = gpu_check.install_wheels(tmp_path / "whl", log, tmp_path)
    assert info["ok"] and info["wheels"] == ["gpucheckprobe-0.1-py3-none-any.whl"], info
    assert site is not None and (Path(site) / "gpucheckprobe.py").exists()
    out = subprocess.run([sys.executable, "-c", "import gpucheckprobe; print(gpucheckprobe.VALUE)"],
                         env=gpu_check.child_env(site), capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "42", out.stderr
    sys.path.remove(site)
    pins = (ROOT / "bench/gpu_wheels.sh").read_text()
    for name in ("simplejpeg==", "kvikio-cu13==", "libkvikio-cu13==", "rapids-logger==", "webdataset==",
                 "braceexpand=="):
        assert name in pins


def test_the_table_figures_read_each_bench_shape():
    assert "images_per_s=900" in gpu_check.headline({"rows": [{"name": "1080p gpu", "images_per_s": 900.0}]})
    assert "GBps=25" in gpu_check.headline({"rows": [{"name": "slot", "samples_per_s": 3.0, "GBps": 25.0}]})
    ck = gpu_check.headline({"gpu": {"io": {"direct": {"blocked_s": 0.02}, "gds": {"error": "DeviceError: x"}}}})
    assert "direct: blocked_s=0.02" in ck and "gds: DeviceError" in ck and "DIFFERS" not in ck
    bad = gpu_check.headline({"gpu": {"io": {"gds": {"blocked_s": 0.02, "round_trip_equal": False}}}})
    assert "gds: blocked_s=0.02 ROUND TRIP DIFFERS" in bad  # a wrong checkpoint is in the table, not only the JSON
    assert gpu_check.headline({"speedup": 2.5}) == "speedup=2.5"
    assert "CUDA" in gpu_check.headline({"benchmark": "read_gds", "error": "CUDA is not available"})
    assert gpu_check.headline(None) == "" and gpu_check.headline({"rows": "odd"}) == ""


@pytest.mark.timeout(120)
def test_sigterm_to_the_runner_stops_the_running_step_with_its_children(tmp_path):
    """A timeout of whatever runs the check (SIGTERM) must not leave the step's own session
    running on the GPU; the steps finished before are in the summary."""
    child_pid = tmp_path / "child.pid"
    hang = ("import subprocess, sys, time\n"
            "c = subprocess.Popen([sys.executable, '-c', 'import time\\nwhile True: time.sleep(1)'])\n"
            f"open({str(child_pid) + '.tmp'!r}, 'w').write(str(c.pid))\n"
            f"import os; os.replace({str(child_pid) + '.tmp'!r}, {str(child_pid)!r})\n"
            "while True: time.sleep(1)\n")
    plan = [{"name": "one", "argv": ["{python}", "-c", "pass"]},
            {"name": "hang", "argv": ["{python}", "-c", hang], "timeout": 100}]
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    out = tmp_path / "out"
    runner = subprocess.Popen([sys.executable, "bench/gpu_check.py", "--dry-run", "--skip-preflight",
                               "--plan-file", str(tmp_path / "plan.json"), "--out", str(out),
                               "--scratch", str(tmp_path / "scratch")], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not child_pid.exists() and time.monotonic() < deadline and runner.poll() is None:
        time.sleep(0.05)  # polling for the step to have started its child
    assert child_pid.exists(), runner.communicate()
    runner.terminate()
    _, err = runner.communicate(timeout=30)
    assert runner.returncode == 143, err
    assert _gone(int(child_pid.read_text())), "the step's child outlived the runner"
    steps = json.loads((out / "gpu_check.json").read_text())["steps"]
    assert steps["one"]["status"] == "ok" and "hang" not in steps


def test_the_gpu_plan_keeps_going_past_a_module_that_cannot_import(tmp_path):
    """On the GPU box a missing wheel makes one test module fail to import: the other modules
    still run (without the flag pytest runs none), a hung test fails alone (signal method)."""
    steps = {s.name: s for s in gpu_check.plan(tmp_path, tmp_path, dry_run=False, pytest_timeout=True)}
    assert list(steps)[:2] == ["tests", "gpu_decode"] and "tests_slow" in steps
    for name in ("tests", "tests_slow"):
        argv = steps[name].argv
        assert "--continue-on-collection-errors" in argv and "timeout_method=signal" in argv
        assert f"--junitxml={tmp_path / f'gpu_{name}.xml'}" in argv
    assert all(f"--ignore={t}" in steps["tests"].argv for t in gpu_check.SLOW_TESTS)
    assert steps["read_gds"].argv[steps["read_gds"].argv.index("--dir") + 1] == str(tmp_path)
    dry = gpu_check.plan(tmp_path, tmp_path, dry_run=True, pytest_timeout=True)
    assert "--collect-only" in dry[0].argv and "--continue-on-collection-errors" not in dry[0].argv
    assert all(s.argv[-1] == "--help" for s in dry if s.kind == "bench")
