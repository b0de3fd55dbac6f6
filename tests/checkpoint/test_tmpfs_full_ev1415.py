"""A really full disk: a save into a 4 MiB tmpfs that cannot hold it (ENOSPC, not the
RLIMIT_FSIZE stand-in of test_faults.py).

The tmpfs is mounted in a private mount namespace (``unshare --mount``; with
``--map-root-user`` when not root), so it vanishes with the child and nothing is
left mounted on the host. Skipped where neither may mount.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SIZE = 4 << 20


def _unshare() -> list[str]:
    exe = shutil.which("unshare")
    if exe is None:
        pytest.skip("no unshare(1): cannot mount a private tmpfs")
    return [exe, "--mount"] + ([] if os.geteuid() == 0 else ["--map-root-user"])


def _in_tmpfs(directory: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    script = f'mount -t tmpfs -o size={SIZE} tmpfs "$0" && exec "$@"'
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(HERE)])}
    return subprocess.run([*_unshare(), "sh", "-c", script, str(directory), *argv], capture_output=True,
                          text=True, env=env, timeout=50)


@pytest.mark.timeout(60)
def test_a_full_tmpfs_fails_the_save_and_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    probe = _in_tmpfs(tmp_path, "true")
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs in a private namespace here: {probe.stderr.strip()}")
    proc = _in_tmpfs(tmp_path, sys.executable, str(HERE / "ck_child.py"), "tmpfsfull", str(tmp_path), "auto",
                     str(SIZE))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out.get("error_type") == "WriteError", out
    assert "No space left on device" in out["error"] and "free space" in out["error"], out
    assert out["latest"] == 1 and out["previous_ok"] is True
    assert [f for f in out["files"] if f.startswith("step-0000000002")] == []  # no half-written data left
    assert out["after"] == 3
    assert list(tmp_path.iterdir()) == []  # the tmpfs (and what was saved in it) went with the namespace
