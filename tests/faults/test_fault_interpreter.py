"""The interpreter and the process environment: ``python -O`` (asserts stripped), ``-W
error`` (every warning an exception), ``-X dev`` (ResourceWarnings and debug checks),
``PYTHONIOENCODING=ascii`` under ``LC_ALL=C``, a missing or read-only ``$TMPDIR``, an
unwritable ``$HOME``; and a current folder deleted under the process.

What is guaranteed: under each of those flags and variables, a pack of non-ASCII names and
an epoch through thread and process workers run as usual with nothing on stderr (feedline
checks no input with ``assert``, opens nothing it does not close, and writes nothing under
``$TMPDIR`` or ``$HOME`` to load). A relative path given while the current folder no
longer exists (deleted or moved away: ``os.getcwd()`` fails) is a ``ConfigError`` naming
the argument, exit 2 from the CLI (before: a bare ``FileNotFoundError`` naming no path, from
``realpath``, exit 1 "No such file or directory ... check the path").
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from feedline.errors import ConfigError
from feedline.format import pack

ROOT = Path(__file__).resolve().parents[2]
HELPERS = Path(__file__).resolve().parent

ROUND_TRIP = r"""
import os, sys
import feedline
from feedline.format import pack

def main():
    src, out = sys.argv[1], sys.argv[2]
    for i in range(8):
        os.makedirs(os.path.join(src, "klasse_\u00fc"), exist_ok=True)
        with open(os.path.join(src, "klasse_\u00fc", f"\u00c4rger{i}.bin"), "wb") as f:
            f.write(bytes([i]) * 100)
    pack(src, out, warn=print)
    ds = feedline.open_dataset(out)
    for kind in ("thread", "process"):
        with feedline.Loader(ds, batch_size=2, workers=2, worker_type=kind, seed=1) as loader:
            got = sorted(b[0] for batch in loader for b in batch["bin"])
        print(kind, got == list(range(8)))

if __name__ == "__main__":
    main()
"""


@pytest.mark.slow  # two interpreters, each starting process workers: about 15 s on 2 busy cores
@pytest.mark.timeout(240)
@pytest.mark.parametrize("flags", [
    {"args": ["-O", "-W", "error", "-X", "dev"], "env": {"LC_ALL": "C", "LANG": "C",
                                                        "PYTHONIOENCODING": "ascii"}},
    {"args": ["-OO"], "env": {"TMPDIR": "/nonexistent/tmp", "HOME": "/nonexistent/home",
                              "XDG_CACHE_HOME": "/nonexistent/cache"}},
])
def test_a_round_trip_under_hostile_interpreter_flags(tmp_path: Path, flags: dict) -> None:
    script = tmp_path / "round_trip.py"
    script.write_text(ROUND_TRIP, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), **flags["env"]}
    res = subprocess.run([sys.executable, *flags["args"], str(script), str(tmp_path / "src"),
                          str(tmp_path / "ds")], env=env, capture_output=True, timeout=220)
    out, err = res.stdout.decode(errors="replace"), res.stderr.decode(errors="replace")
    assert res.returncode == 0, err[-3000:]
    assert "thread True" in out and "process True" in out, out + err[-2000:]
    assert err.strip() == "", err[-3000:]  # no warning, no ResourceWarning


GONE = r"""
import os, sys
from feedline.errors import ConfigError
from feedline.format import pack
from feedline.format import pack
os.rmdir(os.getcwd())          # the folder this process runs in is deleted under it
try:
    pack(sys.argv[1], "rel_out")
except ConfigError as e:
    print("CONFIGERROR", e.field)
"""


def test_a_relative_path_in_a_deleted_folder_is_a_config_error(tmp_path: Path) -> None:
    here = tmp_path / "run"
    here.mkdir()
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.bin").write_bytes(b"x")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    res = subprocess.run([sys.executable, "-c", GONE, str(src)], cwd=here, env=env,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "CONFIGERROR out_dir" in res.stdout, res.stdout + res.stderr[-2000:]


@pytest.mark.parametrize("args", [["pack", "{src}", "--out", "rel"], ["pack", "../src", "--out", "{out}"],
                                  ["verify", "../ds"], ["index", "../x.tar"]])
def test_the_cli_in_a_deleted_folder_says_so(tmp_path: Path, args: list[str]) -> None:
    here = tmp_path / "run"
    here.mkdir()
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.bin").write_bytes(b"x")
    if args[0] == "verify":
        pack(tmp_path / "src", tmp_path / "ds", durable=False)
    with tarfile.open(tmp_path / "x.tar", "w") as tar:
        tar.add(tmp_path / "src" / "a.bin", "a.bin")
    argv = [a.format(src=tmp_path / "src", out=tmp_path / "out") for a in args]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    shell = f'rmdir "{here}" && exec "$@"'
    res = subprocess.run(["sh", "-c", shell, "sh", sys.executable, "-m", "feedline", *argv],
                         cwd=here, env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stderr[-2000:]
    assert "the current folder no longer exists" in res.stderr, res.stderr[-2000:]
    assert "Traceback" not in res.stderr


def test_an_absolute_path_needs_no_current_folder() -> None:
    from feedline.format._files import path_argument

    assert path_argument("/x/y", "root") == "/x/y"
    assert path_argument("s3://bucket/prefix", "root") == "s3://bucket/prefix"
    with pytest.raises(ConfigError):  # sanity: the check is what raises above
        _in_deleted_folder(lambda: path_argument("rel", "root"))


def _in_deleted_folder(fn):  # type: ignore[no-untyped-def]
    import tempfile

    before = os.getcwd()
    gone = tempfile.mkdtemp()
    os.chdir(gone)
    os.rmdir(gone)
    try:
        return fn()
    finally:
        os.chdir(before)
