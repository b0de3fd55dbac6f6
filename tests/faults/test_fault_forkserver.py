"""Starting process workers: the forkserver killed or unable to start, a script read
from stdin.

What is guaranteed: a forkserver that died (the OOM killer picks it: it holds torch; a
``kill``) is reaped and replaced at the next process-worker loader, which starts and reads
its epoch (before: every later loader of the process failed with a bare ``EOFError:
unexpected EOF``); killed while a loader runs, its workers die with it: ``WorkerDied``
``stage="forkserver"`` saying so (before: "exited with code 255", fix "see the worker's
stderr above", where nothing was); a server that cannot start at all (an interpreter this user cannot run,
a failing ``sitecustomize``) is a ``WorkerDied`` at ``stage="start"`` with the fix (before:
a bare ``ConnectionRefusedError`` from ``multiprocessing``), and no arena is left. A
script read from stdin (``python - < train.py``; or deleted since) is a ``ConfigError``
``field="worker_type"`` before any worker starts (before: every worker died importing
``<stdin>``, and the ``WorkerDied`` fix said to add an ``if __name__`` guard).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HELPERS = Path(__file__).resolve().parent

KILLED = r"""
import os, signal, sys
sys.path.insert(0, sys.argv[1])
from multiprocessing import forkserver
from faults_helpers import Numbers, ids
import feedline

def epoch():
    with feedline.Loader(Numbers(32), batch_size=4, workers=2, worker_type="process",
                         start_method="forkserver", shuffle=False) as loader:
        return sorted(i for b in loader for i in ids(b)) == list(range(32))

if __name__ == "__main__":
    print("FIRST", epoch())
    pid = forkserver._forkserver._forkserver_pid
    os.kill(pid, signal.SIGKILL)      # the OOM killer picks the forkserver
    os.waitpid(pid, 0)                # and it is gone (nothing of it left to connect to)
    print("AFTER", epoch())
    try:                              # the same while a loader runs: its workers go with it
        with feedline.Loader(Numbers(4000), batch_size=4, workers=2, worker_type="process",
                             start_method="forkserver", shuffle=False) as loader:
            for n, _ in enumerate(loader):
                if n == 3:
                    os.kill(forkserver._forkserver._forkserver_pid, signal.SIGKILL)
    except feedline.errors.WorkerDied as e:
        print("MIDEPOCH", e.stage)
    print("AGAIN", epoch())
"""


@pytest.mark.slow  # three forkservers start, each importing torch: about 15 s on 2 busy cores
@pytest.mark.timeout(120)
def test_a_killed_forkserver_is_replaced_by_the_next_loader(tmp_path: Path) -> None:
    script = tmp_path / "killed.py"  # a file: the workers import its __main__
    script.write_text(KILLED)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    res = subprocess.run([sys.executable, str(script), str(HELPERS)], env=env,
                         capture_output=True, text=True, timeout=110)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "FIRST True" in res.stdout and "AFTER True" in res.stdout, res.stdout + res.stderr[-3000:]
    assert "MIDEPOCH forkserver" in res.stdout and "AGAIN True" in res.stdout, res.stdout + res.stderr[-3000:]


CANNOT_START = r"""
import multiprocessing, sys
sys.path.insert(0, sys.argv[1])
from faults_helpers import Numbers, arenas
import feedline
from feedline.errors import WorkerDied

if __name__ == "__main__":
    multiprocessing.set_executable("/bin/false")   # an interpreter that exits at once
    try:
        with feedline.Loader(Numbers(16), batch_size=4, workers=2, worker_type="process",
                         start_method="forkserver") as loader:
            next(iter(loader))
    except WorkerDied as e:
        print("WORKERDIED", e.stage, "spawn" in (e.fix or ""))
    print("ARENAS", arenas("/dev/shm"))
"""


@pytest.mark.timeout(60)
def test_a_forkserver_that_cannot_start_is_worker_died(tmp_path: Path) -> None:
    script = tmp_path / "cannot.py"
    script.write_text(CANNOT_START)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    res = subprocess.run([sys.executable, str(script), str(HELPERS)], env=env,
                         capture_output=True, text=True, timeout=50)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "WORKERDIED start True" in res.stdout, res.stdout + res.stderr[-3000:]
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    assert "ARENAS []" in res.stdout, res.stdout


STDIN = r"""
import sys
sys.path.insert(0, HELPERS)
from faults_helpers import Numbers
import feedline
from feedline.errors import ConfigError
try:
    with feedline.Loader(Numbers(16), batch_size=4, workers=2, worker_type="process",
                         start_method="forkserver") as loader:
        next(iter(loader))
except ConfigError as e:
    print("CONFIGERROR", e.field, "thread" in (e.fix or ""))
with feedline.Loader(Numbers(16), batch_size=4, workers=2, worker_type="process") as loader:
    n = sum(1 for _ in loader)
    print("FORKED", loader.stats["processes"]["start_method"], n)
"""


@pytest.mark.timeout(60)
def test_process_workers_for_a_script_read_from_stdin_are_refused_saying_why() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    code = STDIN.replace("HELPERS", repr(str(HELPERS)))
    res = subprocess.run([sys.executable, "-"], input=code, env=env, capture_output=True,
                         text=True, timeout=50)  # python - < train.py, a heredoc
    assert res.returncode == 0, res.stderr[-3000:]
    assert "CONFIGERROR worker_type True" in res.stdout, res.stdout + res.stderr[-3000:]
    assert "FORKED fork 4" in res.stdout, res.stdout  # fork re-imports nothing: it runs
    assert "Traceback" not in res.stderr, res.stderr[-3000:]  # before: each worker's, and
    # WorkerDied "exited with code 1" whose fix said to add an `if __name__` guard
