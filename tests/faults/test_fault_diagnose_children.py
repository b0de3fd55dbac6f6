"""``feedline diagnose`` running training commands that do not behave: one that moves to
a session of its own (``setsid``) and so does not get the terminal's Ctrl-C, one whose
SIGTERM handler never exits, one that closes its stdout, one that writes 64 MiB of output,
one whose temporary folders a temp cleaner removes mid-run.

What is guaranteed: Ctrl-C at the terminal ends diagnose and the command (before: the
command was assumed to have got the Ctrl-C too, nothing was forwarded, and diagnose
waited forever); a second SIGTERM or SIGINT to diagnose ends the command with SIGKILL,
exit 137 (before: diagnose could only be stopped by kill -9, which left the command
running, reparented to init); the command's own output, closed or huge, is its own;
diagnose's folders made again when a temp cleaner removed them (before: the command's
DataLoader workers crashed on the span log, and the report was lost).
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}

SETSID = """
import os, time
os.setsid()
print("READY", os.getpid(), flush=True)
while True:
    time.sleep(1)
"""

STUBBORN = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *a: print("GOT SIGTERM", flush=True))  # and go on
print("READY", os.getpid(), flush=True)
while True:
    time.sleep(1)
"""


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _read_until(fd: int, word: bytes, seen: bytearray, deadline: float) -> bytes:
    """Read ``fd`` until a line holding ``word`` has arrived; return that line."""
    while time.monotonic() < deadline:
        for line in bytes(seen).split(b"\n")[:-1]:  # whole lines only
            if word in line:
                return line
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the pty's other end closed
            break
        if not chunk:
            break
        seen += chunk
    raise AssertionError(f"no {word!r} in the output: {bytes(seen)[-2000:]!r}")


@pytest.mark.timeout(150)
def test_ctrl_c_reaches_a_command_in_its_own_session(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SETSID)
    master, slave = pty.openpty()

    def controlling_terminal() -> None:  # diagnose leads a session whose terminal is the pty
        # as an interactive shell starts it: a suite run in the background (``cmd &`` in a
        # script) has SIGINT ignored, and the command would inherit that and outlive Ctrl-C
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.setsid()
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen([sys.executable, "-m", "feedline", "diagnose", "--quiet", "--",
                             sys.executable, str(script)], stdin=slave, stdout=slave, stderr=slave,
                            env=ENV, preexec_fn=controlling_terminal)
    os.close(slave)
    child = None
    try:
        line = _read_until(master, b"READY", bytearray(), time.monotonic() + 40)
        child = int(line.split()[1])
        os.write(master, b"\x03")  # Ctrl-C typed at the terminal: SIGINT to its foreground group
        proc.wait(timeout=90)  # 1.7 s here; 17 s at load 6 (the child's hooks write a report)
        assert proc.returncode != 0
        deadline = time.monotonic() + 10
        while not _gone(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(child), "the training command outlived diagnose"
    finally:
        proc.kill()
        proc.wait()
        if child is not None and not _gone(child):
            os.kill(child, signal.SIGKILL)
        os.close(master)


@pytest.mark.timeout(150)
def test_a_second_sigterm_ends_a_command_that_outlasts_the_first(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(STUBBORN)
    proc = subprocess.Popen([sys.executable, "-m", "feedline", "diagnose", "--quiet", "--",
                             sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=ENV)
    assert proc.stdout is not None
    seen = bytearray()
    child = None
    try:
        line = _read_until(proc.stdout.fileno(), b"READY", seen, time.monotonic() + 40)
        child = int(line.split()[1])
        proc.send_signal(signal.SIGTERM)
        _read_until(proc.stdout.fileno(), b"GOT SIGTERM", seen, time.monotonic() + 40)  # forwarded
        assert proc.poll() is None  # the command goes on, so does diagnose
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)  # a loaded host: the report is still read
        assert proc.returncode == 137, err[-2000:]  # 128 + SIGKILL
        assert b"SIGKILL" in err and b"Traceback" not in err
        assert _gone(child)
    finally:
        proc.kill()
        proc.wait()
        if child is not None and not _gone(child):
            os.kill(child, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("body", [
    "import os\nos.close(1)\nos.close(2)\n",
    "import sys\nblock = 'x' * 1023 + '\\n'\nfor _ in range(65536):\n    sys.stdout.write(block)\n",
], ids=["closes-stdout", "writes-64MiB"])
def test_the_commands_own_output_is_its_own(tmp_path: Path, body: str) -> None:
    script = tmp_path / "train.py"
    script.write_text(body + "raise SystemExit(3)\n")
    res = subprocess.run([sys.executable, "-m", "feedline", "diagnose", "--quiet", "--",
                          sys.executable, str(script)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, env=ENV, timeout=100)
    assert res.returncode == 3, res.stderr[-2000:]
    assert b"Traceback" not in res.stderr


CLEANED = """
import glob, os, shutil
from torch.utils.data import DataLoader

for step, batch in enumerate(DataLoader(list(range(400)), batch_size=2, num_workers=2)):
    if step == 10:  # a temp cleaner empties $TMPDIR's feedline folders mid-run
        for folder in glob.glob(os.path.join(os.environ["TMPDIR"], "feedline-*")):
            shutil.rmtree(folder)
print("STEPS", step + 1)
"""


@pytest.mark.timeout(120)
def test_a_temp_cleaner_mid_run_breaks_neither_the_training_nor_its_report(tmp_path: Path) -> None:
    """diagnose's folders under $TMPDIR (the report, the DataLoader workers' span logs)
    removed mid-run (before: the DataLoader workers raised FileNotFoundError, the training
    crashed, and the report was lost)."""
    script, out, tmp = tmp_path / "train.py", tmp_path / "report.json", tmp_path / "tmp"
    script.write_text(CLEANED)
    tmp.mkdir()
    res = subprocess.run([sys.executable, "-m", "feedline", "diagnose", "--quiet", "--json", str(out),
                          "--", sys.executable, str(script)], capture_output=True, text=True,
                         env={**ENV, "TMPDIR": str(tmp)}, timeout=110)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "STEPS 200" in res.stdout and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert json.loads(out.read_text())["steps"] >= 150  # the whole run, less the warm-up
