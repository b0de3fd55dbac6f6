"""File names that drive the terminal: the CLI's warnings, errors and verify lines quote
file names and keys, and a downloaded dataset's names may hold ESC sequences (``ESC[2J``
clears the screen, ``ESC]0;...BEL`` sets the window title), ``\\r`` (writes over the
line) or a newline (one warning became two lines). Each is shown as its escape.

Before: the bytes went to the terminal as they were, and a name with a newline was
skipped as having "no field extension"."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from feedline.cli._output import printable

ROOT = Path(__file__).resolve().parents[2]
_ESCAPES = ("k\x1b[2J", "t\x1b]0;pwned\x07", "r\rfake", "nl\nx")


def _cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "400"}
    return subprocess.run([sys.executable, "-m", "feedline", *args], env=env, capture_output=True, timeout=100)


def _no_controls(data: bytes) -> None:
    text = data.decode("utf-8", "replace")
    assert not any(c in text for c in "\x1b\x07\r"), text
    assert all(line.startswith(("feedline: ", "UNDECODABLE", "packed", "1 problem", "ok:"))
               for line in text.splitlines() if line.strip()), text


@pytest.mark.parametrize("name", _ESCAPES, ids=["clear-screen", "title", "carriage-return", "newline"])
def test_pack_warnings_show_control_characters_as_escapes(tmp_path: Path, name: str) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "ok.bin").write_bytes(b"1")
    (src / name).write_bytes(b"no extension: skipped and listed")
    (src / f"{name}.bin").write_bytes(b"")  # packed, listed as empty (unless the newline skips it)
    r = _cli("pack", str(src), "--out", str(tmp_path / "out"), "-q")
    assert r.returncode == 0, r.stderr
    _no_controls(r.stderr)
    assert printable(name).encode() in r.stderr
    if "\n" in name:
        assert b"a newline in its name" in r.stderr


def test_verify_lines_and_errors_show_control_characters_as_escapes(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "ok.json").write_bytes(b"1")
    (src / "k\x1b[31m.json").write_bytes(b'{"a":')  # undecodable: verify --decode names its key
    assert _cli("pack", str(src), "--out", str(tmp_path / "out"), "-q").returncode == 0
    r = _cli("verify", "--decode", str(tmp_path / "out"))
    assert r.returncode == 1 and b"key=k\\x1b[31m" in r.stdout, r.stdout
    _no_controls(r.stdout)
    bad = tmp_path / "ds\x1b[2J\r"
    bad.mkdir()
    (bad / "manifest.json").write_bytes(b"garbage")
    r = _cli("verify", str(bad))
    assert r.returncode == 1
    _no_controls(r.stderr)
