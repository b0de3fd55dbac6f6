"""Signals to a training process at unlucky moments: never lost, nothing left behind.

A loader dropped without ``close()`` (``loader = Loader(...)`` again every epoch)
is closed by its finalizer, which waits for its workers. A Ctrl-C, or a SIGTERM
whose handler calls ``sys.exit`` (a cluster's pre-emption notice), that arrived
during that wait was raised inside the finalizer, printed as "Exception ignored"
and lost: the training went on. Now it is delivered once the finalizer returns
(``feedline.pipeline._deferred_signals``). The slow part sends SIGINT, SIGTERM
or SIGKILL, to the process or its whole group (a terminal's Ctrl-C), at random
points of start-up, iteration and loader re-creation: the exit status is the
signal's, and no worker process, arena or worker traceback is left.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from faults_helpers import arenas

ROOT = Path(__file__).resolve().parents[2]

DROPPED = """
import os, signal, sys, threading, time
import feedline
from faults_helpers import Numbers


class Stuck(Numbers):
    def __getitem__(self, i):
        if i >= 4:
            time.sleep(60)  # past the first batch, workers hang: closing waits for them
        return super().__getitem__(i)


if __name__ == "__main__":
    worker_type, how = sys.argv[2], sys.argv[3]
    sig = signal.SIGINT
    if how == "sigterm-exit":  # a pre-emption handler
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        sig = signal.SIGTERM
    loader = feedline.Loader(Stuck(64), batch_size=4, workers=2, worker_type=worker_type,
                             shm_dir=sys.argv[1], shuffle=False)
    it = iter(loader)
    next(it)
    print(f"SIGNAL_AT {time.monotonic() + 0.5}", flush=True)
    threading.Timer(0.5, os.kill, (os.getpid(), sig)).start()
    del it, loader  # dropped without close(): its finalizer waits for the stuck workers
    time.sleep(20)  # the signal must end the program here at the latest
    print("survived", flush=True)
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{Path(__file__).parent}"}


def _dropped(tmp_path: Path, worker_type: str, how: str) -> None:
    script = tmp_path / "train.py"
    script.write_text(DROPPED)
    proc = subprocess.run([sys.executable, str(script), str(tmp_path), worker_type, how], env=_env(),
                          capture_output=True, text=True, timeout=90,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    ended = time.monotonic()
    assert "survived" not in proc.stdout, proc.stderr[-2000:]  # before: the signal was lost
    assert proc.returncode == (-signal.SIGINT if how == "sigint" else 143), proc.stderr[-2000:]
    assert "Exception ignored" not in proc.stderr
    # delivered at once, not after the sleep (or a stuck worker's timeouts); counted from the
    # signal, not from the start (importing torch on a loaded host took 15 s)
    signalled = float(proc.stdout.split("SIGNAL_AT ")[1].split()[0])
    print(f"signal to exit: {ended - signalled:.2f} s")
    assert ended - signalled < 10


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["sigint", "sigterm-exit"])
def test_a_signal_while_a_dropped_loader_closes_is_not_lost(tmp_path: Path, how: str) -> None:
    _dropped(tmp_path, "thread", how)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_ctrl_c_while_a_dropped_process_loader_closes_is_not_lost(tmp_path: Path) -> None:
    _dropped(tmp_path, "process", "sigint")
    assert arenas(tmp_path) == []


FORK_POKE = """
import os, signal, sys
import feedline
from faults_helpers import Numbers

fired = []


def poke():  # the Ctrl-C lands while os.fork runs its callbacks (logging's lock release is one)
    if not fired:
        fired.append(1)
        os.kill(os.getpid(), signal.SIGINT)


if __name__ == "__main__":
    os.register_at_fork(after_in_parent=poke)
    try:
        with feedline.Loader(Numbers(16), batch_size=4, workers=1, worker_type="process",
                             shm_dir=sys.argv[1], start_method="fork") as loader:
            for _ in loader:
                pass
            print("lost", loader.stats["processes"]["start_method"], flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
"""


@pytest.mark.timeout(120)
def test_a_ctrl_c_during_the_fork_of_a_worker_is_not_lost(tmp_path: Path) -> None:
    """Before: raised inside an at-fork callback, "Exception ignored in", and the training went on
    (1 of 16 seeded cases of the random-points test under load, SIGINT to the group)."""
    script = tmp_path / "train.py"
    script.write_text(FORK_POKE)
    proc = subprocess.run([sys.executable, str(script), str(tmp_path)], env=_env(), capture_output=True,
                          text=True, timeout=90, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout.strip() == "interrupted", (proc.stdout, proc.stderr[-2000:])
    assert "Exception ignored" not in proc.stderr
    assert arenas(tmp_path) == []


EPOCHS = """
import sys, time
import feedline
from faults_helpers import Numbers

if __name__ == "__main__":
    for epoch in range(1000):
        loader = feedline.Loader(Numbers(200), batch_size=4, workers=2, worker_type="process",
                                 shm_dir=sys.argv[1])
        loader.set_epoch(epoch)
        for i, batch in enumerate(loader):
            if epoch == 0 and i == 0:
                print("iterating", flush=True)
            time.sleep(0.002)
        if sys.argv[2] == "close":
            loader.close()
"""


def _noise(err: str) -> list[str]:
    """Lines of ``err`` that say something went wrong besides the signal itself: a line with
    "Error" outside the traceback of the ``KeyboardInterrupt`` a SIGINT raises, or an
    "Exception ignored" (a signal raised inside a finalizer, and lost). A SIGINT that lands
    while modules are imported gives a traceback through their lines; before, one of them
    holding "Error" (``from feedline.errors import ...``, ``class RegistryError(Exception):``)
    failed the test (case 4 of 16, SIGINT to the group during imports, exit -2, once in 9
    runs under load)."""
    blocks = err.split("Traceback (most recent call last):")
    kept = blocks[0].splitlines()
    for block in blocks[1:]:
        lines = block.splitlines()[1:]
        # the traceback's frames are indented; its first unindented line is the exception
        end = next((i for i, line in enumerate(lines) if line and not line[0].isspace()), len(lines))
        interrupt = end < len(lines) and lines[end].startswith("KeyboardInterrupt")
        kept += lines[end + 1:] if interrupt else lines
    return [line for line in kept
            if ("Error" in line and "KeyboardInterrupt" not in line) or "Exception ignored" in line]


def _session(sid: int) -> list[str]:
    out = subprocess.run(["ps", "-e", "-o", "pid=,sid=,args="], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line.split()[1] == str(sid)]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_signals_at_random_points_leave_nothing(tmp_path: Path) -> None:
    """16 seeded cases: before, 1 in 24 lost its SIGINT (the training never stopped)."""
    script = tmp_path / "train.py"
    script.write_text(EPOCHS)
    rng = random.Random(2)
    failures = []
    for case in range(16):
        shm = tmp_path / f"shm{case}"
        shm.mkdir()
        sig = rng.choice([signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
        group = rng.random() < 0.5  # a terminal's Ctrl-C reaches the whole foreground group
        mode = rng.choice(["close", "dropped"])
        proc = subprocess.Popen([sys.executable, str(script), str(shm), mode], env=_env(), text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        assert proc.stdout is not None
        if rng.random() < 0.7:  # after the first batch; else during imports and worker start-up
            assert proc.stdout.readline().strip() == "iterating"
        time.sleep(rng.uniform(0, 1.5))
        try:
            os.killpg(proc.pid, sig) if group else os.kill(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            failures.append((case, sig.name, group, mode, "still running 60 s after the signal"))
            continue
        deadline = time.monotonic() + 30
        while _session(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)  # the forkserver and workers notice their parent is gone
        noise = _noise(err)
        if proc.returncode != -sig or _session(proc.pid) or arenas(shm) or noise:
            failures.append((case, sig.name, group, mode, proc.returncode, _session(proc.pid), noise[:3]))
    assert failures == []
