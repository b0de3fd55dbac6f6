"""`feedline diagnose` as a command: exit status, reports on crashes, nesting, no loader."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from cli_inproc import run_cli

NESTED_EXIT_3 = """
import sys, time
import torch
from torch.utils.data import DataLoader
outer = DataLoader(list(range(40)), batch_size=2)
inner = DataLoader(list(range(400)), batch_size=4)
it = iter(inner)
for step, batch in enumerate(outer):
    next(it)            # a loader used inside the step: timed as a stage, not a step
    time.sleep(0.002)
    if step == 6:
        sys.exit(3)
"""

CRASH = """
import time
from torch.utils.data import DataLoader
for step, batch in enumerate(DataLoader(list(range(40)), batch_size=2)):
    time.sleep(0.002)
    print("the script's own output", step)
    if step == 4:
        raise RuntimeError("boom in the training step")
"""

CTRL_C = """
import signal, time
from torch.utils.data import DataLoader
signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started with SIGINT ignored
for step, batch in enumerate(DataLoader(list(range(40)), batch_size=2)):
    time.sleep(0.002)
    if step == 4:
        signal.raise_signal(signal.SIGINT)  # Ctrl-C that nobody catches
"""

SIGTERM_STORM = """
import os, signal, threading, time
from torch.utils.data import DataLoader

def storm():  # a scheduler's SIGTERM to the group, forwarded by diagnose too: many, close
    for _ in range(400):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.002)

for step, batch in enumerate(DataLoader(list(range(4000)), batch_size=2)):
    time.sleep(0.002)
    if step == 5:
        threading.Thread(target=storm, daemon=True).start()
"""

NO_LOADER = """
import sys
print("no data loader here; torch loaded:", "torch" in sys.modules)
"""

TRAIN_THEN_EXPORT = """
import time
import torch
from torch.utils.data import DataLoader
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x in DataLoader(torch.randn(64, 4), batch_size=4):
    model(x).sum().backward()
    opt.step()
    opt.zero_grad()
    time.sleep(0.01)
print("trained", flush=True)
"""


def run(tmp: Path, name: str, body: str, *opts: str) -> tuple[subprocess.CompletedProcess, dict]:
    """Diagnose ``body``; its report from ``--json FILE``, or from stdout with ``opts`` ``--json -``."""
    script = tmp / f"{name}.py"
    script.write_text(textwrap.dedent(body))
    out = tmp / f"{name}.json"
    dest = [] if "--json" in opts else ["--json", str(out)]
    cmd = [sys.executable, "-m", "feedline", "diagnose", *dest, *opts, "--", sys.executable, str(script)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=150, check=False)
    if not dest:
        return proc, json.loads(proc.stdout)
    return proc, (json.loads(out.read_text()) if out.exists() else {})


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("cli")
    jobs = {"nested": (NESTED_EXIT_3,), "crash": (CRASH, "--json", "-"), "none": (NO_LOADER,),
            "ctrl_c": (CTRL_C,), "sigterms": (SIGTERM_STORM,)}
    with ThreadPoolExecutor(max_workers=3) as pool:
        futs = {k: pool.submit(run, tmp, k, *v) for k, v in jobs.items()}
        return {k: f.result() for k, f in futs.items()}


@pytest.mark.timeout(300)
def test_exit_status_is_preserved_and_only_the_outer_loader_steps(results: dict) -> None:
    proc, data = results["nested"]
    assert proc.returncode == 3, proc.stderr
    assert data["steps"] == 6  # 7 steps (0..6), the first is warm-up
    assert data["loader"]["label"] == "loader-2"  # stepped first of the two 7-step loaders
    assert data["stages"]["fetch"]["count"] == 7  # its own fetches only
    (other,) = data["loaders"]  # the loader used once inside each step: its own line
    assert other["label"] == "loader-1" and other["steps"] == 7
    assert other["stages"]["fetch"]["count"] == 7
    assert other["role"] == "lockstep"  # one next() per step: the same steps, as zip's
    assert "STEP (wait+body)" in proc.stderr and "lockstep training loader loader-1" in proc.stderr


@pytest.mark.timeout(300)
def test_a_crashing_script_still_gets_its_report(results: dict) -> None:
    proc, data = results["crash"]  # with --json -: stdout is the report alone (parsed by run)
    assert proc.returncode == 1
    assert "boom in the training step" in proc.stderr
    assert data["steps"] == 4
    assert "the script's own output 4" in proc.stderr  # before: on stdout, ahead of the JSON


@pytest.mark.timeout(300)
def test_an_uncaught_ctrl_c_ends_with_130_as_without_diagnose(results: dict) -> None:
    # Python ends itself by SIGINT after an uncaught KeyboardInterrupt; building the
    # report at exit (imports that exec strings) must not turn that into status 1
    proc, data = results["ctrl_c"]
    assert proc.returncode == 130, proc.stderr
    assert "KeyboardInterrupt" in proc.stderr and data["steps"] == 4


@pytest.mark.timeout(300)
def test_sigterms_arriving_while_the_report_is_written_end_the_run(results: dict) -> None:
    # the first SIGTERM writes the report; the next ones land inside that (on the same
    # thread) and used to wait for it forever: the run must end as killed by SIGTERM
    proc, data = results["sigterms"]
    assert proc.returncode == 128 + 15, proc.stderr
    assert data["steps"] >= 4


@pytest.mark.timeout(300)
def test_a_script_without_a_loader_says_so(results: dict) -> None:
    proc, data = results["none"]
    assert proc.returncode == 0
    # the script never imports torch, and diagnose does not import it for the script
    assert "no data loader here; torch loaded: False" in proc.stdout
    assert "no training steps measured" in proc.stderr
    assert data["steps"] == 0


SHELL_STEP = "import os; print('{}', os.environ.get('FEEDLINE_DIAGNOSE_PID') == str(os.getpid()))"


@pytest.mark.timeout(120)
def test_the_first_python_of_a_shell_command_is_its_own_process_and_the_next_ones_are_not(
        tmp_path: Path) -> None:
    """A shell runs its Python programs side by side: only the first claims the command's
    report; the later ones are processes the command started (measured if they train), so
    a ``python export.py`` after training cannot overwrite the trainer's report."""
    py = sys.executable
    line = f"{py} -c \"{SHELL_STEP.format('first')}\"; {py} -c \"{SHELL_STEP.format('second')}\""
    proc = subprocess.run([py, "-m", "feedline", "diagnose", "--quiet", "--", "sh", "-c", line],
                          capture_output=True, text=True, timeout=100, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["first", "True", "second", "False"], proc.stdout


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_shell_command_that_trains_then_exports_reports_the_training(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TRAIN_THEN_EXPORT)
    out = tmp_path / "r.json"
    py = sys.executable
    proc = subprocess.run([py, "-m", "feedline", "diagnose", "--json", str(out), "--", "sh", "-c",
                           f"{py} {tmp_path / 'train.py'} && {py} -c \"print('exported')\""],
                          capture_output=True, text=True, timeout=250, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["trained", "exported"]
    data = json.loads(out.read_text())
    assert data["steps"] == 15 and data["verdict"] != "unknown", data["reason"]


def test_missing_command_is_a_usage_error() -> None:
    proc = run_cli("diagnose")  # in this interpreter: refused before anything starts
    assert proc.returncode == 2
    assert "no training command given" in proc.stderr


def test_unstartable_command_is_a_usage_error(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "feedline", "diagnose", "--",
                           str(tmp_path / "nope")], capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 2
    assert "cannot start" in proc.stderr
