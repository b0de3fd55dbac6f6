"""Output plumbing and names the CLI did not choose: a reader that stops reading
(``feedline inspect DS | head -1``), stdout closed, no TTY, ``TERM=dumb``, ``LC_ALL=C``,
and a source tree with non-ASCII names, names that are not valid UTF-8, names longer
than 255 bytes in the tar, and names that differ only in case.

What is guaranteed: a closed pipe ends the command with 141, as SIGPIPE ends other tools,
nothing on stderr (before: click and rich turned it into a silent exit 1, the status of a
runtime error); every such name is packed, listed, verified and read
back byte for byte under the C locale, each as its own sample.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import feedline

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "LC_ALL": "C", "LANG": "C", "TERM": "dumb"}


def _cli(*args: str, stdout: int | None = subprocess.PIPE) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "feedline", *args], env=ENV, stdout=stdout,
                          stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, timeout=100)


NAMES = [
    "klasse_\u00fc/\u00c4rger.bin".encode(),         # non-ASCII (UTF-8) folder and file
    b"cls/bad\xff\xfename.bin",                      # not valid UTF-8
    b"cls/A.bin", b"cls/a.bin",                      # differ only in case
    b"cls/" + b"x" * 250 + b".bin",                  # a 254-byte file name
    b"cls/" + b"y" * 200 + b"/" + b"z" * 200 + b"/" + b"w" * 200 + b".bin",  # a 600-byte path
]


@pytest.fixture(scope="module")
def odd_names(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[bytes, bytes]]:
    root = tmp_path_factory.mktemp("names")
    src = os.fsencode(root / "src")
    content = {}
    for i, name in enumerate(NAMES):
        path = os.path.join(src, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        content[name] = bytes([i + 1]) * (100 + i)
        with open(path, "wb") as f:
            f.write(content[name])
    return root, content


@pytest.mark.timeout(120)
def test_odd_names_under_the_c_locale_round_trip(odd_names: tuple[Path, dict[bytes, bytes]]) -> None:
    root, content = odd_names
    out = root / "ds"
    res = _cli("pack", str(root / "src"), "--out", str(out))
    assert res.returncode == 0, res.stderr.decode(errors="replace")[-2000:]
    for command in ("inspect", "verify"):
        res = _cli(command, str(out))
        assert res.returncode == 0 and b"Traceback" not in res.stderr, res.stderr[-2000:]
    ds = feedline.open_dataset(out, verify=True)
    assert len(ds) == len(NAMES)
    got = {}
    for i in range(len(ds)):
        sample = ds[i]
        got[os.fsencode(sample["__key__"]) + b".bin"] = bytes(sample["bin"])
    assert got == content  # each name its own sample (A and a too), bytes intact


@pytest.mark.timeout(120)
@pytest.mark.parametrize("args", [("inspect", "DS"), ("verify", "DS"), ("--help",), ("pack", "--help")])
def test_a_reader_that_stops_reading_ends_the_command_quietly_with_141(odd_names: tuple[Path, dict[bytes, bytes]],
                                                     args: tuple[str, ...]) -> None:
    root, _ = odd_names
    if not (root / "ds" / "manifest.json").exists():
        assert _cli("pack", str(root / "src"), "--out", str(root / "ds")).returncode == 0
    args = tuple(str(root / "ds") if a == "DS" else a for a in args)
    r, w = os.pipe()
    os.close(r)  # `| head -1` that has already exited: every write is EPIPE
    try:
        res = _cli(*args, stdout=w)
    finally:
        os.close(w)
    assert res.returncode == 141, res.stderr[-2000:]  # as SIGPIPE ends `yes | head -1`
    assert res.stderr == b""
    # stdout closed altogether (`>&-`): nothing is written, not an error
    res = subprocess.run([sys.executable, "-m", "feedline", *args], env=ENV, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, timeout=100, close_fds=True,
                         preexec_fn=lambda: os.close(1))
    assert res.returncode == 0, res.stderr[-2000:]


@pytest.mark.timeout(120)
def test_stdout_on_a_full_device_is_one_line_and_exit_1(odd_names: tuple[Path, dict[bytes, bytes]]) -> None:
    root, _ = odd_names
    if not (root / "ds" / "manifest.json").exists():
        assert _cli("pack", str(root / "src"), "--out", str(root / "ds")).returncode == 0
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    with open("/dev/full", "wb") as full:
        res = _cli("inspect", str(root / "ds"), stdout=full.fileno())
    assert res.returncode == 1 and b"No space left on device" in res.stderr, res.stderr[-2000:]
    assert b"Traceback" not in res.stderr and len(res.stderr.splitlines()) == 1
    res = _cli("verify", str(root / "ds"), "--json", "/dev/full")
    assert res.returncode == 1 and b"/dev/full" in res.stderr and b"Traceback" not in res.stderr
