"""What a save killed mid-write (kill -9) leaves is removed by the next Checkpointer that
takes the folder's lock, never while a live writer holds it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from feedline.checkpoint import Checkpointer, load
from feedline.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import sys
import numpy as np
from feedline.checkpoint import Checkpointer
ck = Checkpointer(sys.argv[1], io="buffered")
if sys.argv[2] == "hold":  # a live writer: lock taken, an uncommitted data file of its own
    ck.reserve({"w": np.ones(4, dtype=np.float32)})
    open(sys.argv[1] + "/step-0000000009.0badcafe.bin", "wb").close()
    print("holding", flush=True)
    sys.stdin.read()
else:
    ck.save(1, {"w": np.ones(4, dtype=np.float32)})
    ck.wait()
    ck.save(2, {"w": np.ones(8 << 20, dtype=np.float32)})  # 32 MiB, written in the background
    print("saving", flush=True)
    ck.wait()
"""


def _child(directory: Path, mode: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.Popen([sys.executable, "-c", CHILD, str(directory), mode], env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def _data_files(directory: Path, step: int) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.startswith(f"step-{step:010d}.") and n.endswith(".bin"))


@pytest.mark.timeout(60)
def test_a_save_killed_mid_write_is_cleaned_by_the_next_checkpointer(tmp_path: Path) -> None:
    """Before: the killed save's data file (the whole state's size) stayed until the next
    save had committed, so the folder held it on top of that save."""
    d = tmp_path / "ck"
    proc = _child(d, "save")
    assert proc.stdout is not None and proc.stdout.readline().strip() == "saving"
    deadline = time.monotonic() + 30
    while not _data_files(d, 2) and time.monotonic() < deadline:
        time.sleep(0.001)
    os.kill(proc.pid, signal.SIGKILL)  # mid-write: its header comes only after the data's fsync
    proc.wait()
    left = _data_files(d, 2)
    assert left and not (d / "step-0000000002.json").exists(), left
    ck = Checkpointer(d, io="buffered")
    try:
        ck.reserve({"w": np.ones(4, dtype=np.float32)})  # takes the lock: the killed save's file goes
        assert _data_files(d, 2) == []
        assert (d / ".recycle.bin").exists()  # kept for the next save to write over
        ck.save(3, {"w": np.full(4, 3.0, dtype=np.float32)})
        ck.wait()
    finally:
        ck.close()
    assert float(load(d, 3)["w"][0]) == 3.0 and float(load(d, 1)["w"][0]) == 1.0
    assert sorted(n for n in os.listdir(d) if not n.startswith(".feedline")) == [
        _data_files(d, 1)[0], "step-0000000001.json", _data_files(d, 3)[0], "step-0000000003.json"]


@pytest.mark.timeout(60)
def test_a_live_writers_unfinished_file_is_never_removed(tmp_path: Path) -> None:
    d = tmp_path / "ck"
    proc = _child(d, "hold")
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "holding"
        ck = Checkpointer(d, io="buffered")
        with pytest.raises(ConfigError, match=f"pid {proc.pid}"):
            ck.save(1, {"w": np.ones(4, dtype=np.float32)})
        ck.close()
        assert (d / "step-0000000009.0badcafe.bin").exists()
    finally:
        proc.kill()
        proc.wait()
