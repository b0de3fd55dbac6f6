"""The shared CLI front: bad arguments are one line on stderr and exit 2."""

import subprocess
import sys

import pytest

BAD = [
    ["model", "--workers", "x", "--read", "1ms", "--decode", "1ms", "--h2d", "1ms", "--gpu", "1ms"],
    ["doctor", "--bogus"],
    ["no-such-command"],
    ["model", "--read", "12parsecs", "--decode", "1ms", "--h2d", "1ms", "--gpu", "1ms"],
]


@pytest.mark.parametrize("argv", BAD, ids=lambda a: " ".join(a[:2]))
def test_bad_arguments_one_line_exit_2(argv):
    out = subprocess.run(
        [sys.executable, "-m", "feedline", *argv], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("feedline: error:"), out.stderr
    assert "Traceback" not in out.stderr


def test_help_lists_every_command():
    out = subprocess.run(
        [sys.executable, "-m", "feedline", "--help"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0
    for cmd in ("demo", "pack", "index", "inspect", "verify", "model", "doctor", "diagnose"):
        assert cmd in out.stdout
