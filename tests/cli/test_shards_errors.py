"""pack / index / inspect / verify on OS errors and bad arguments: one line, the right exit status.

Real faults, in a real ``feedline`` process where the child must be set up (else in the test's
interpreter, through the same front: ``cli_inproc``): a full file system (a 256 KiB
tmpfs mounted for the test when the runner may mount; otherwise a file-size
limit, RLIMIT_FSIZE, which fails the same writes with EFBIG), folders without
read or write permission (when the tests run as root, the CLI child drops the
capabilities that let root ignore permissions, so the kernel enforces them),
symbolic-link loops, files where folders are expected.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cli_inproc import run_cli
from feedline.format import MANIFEST_NAME, read_manifest, verify

SRC = str(Path(__file__).resolve().parents[2] / "src")
_PR_CAPBSET_DROP = 24
_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH = 1, 2


def _drop_dac() -> None:
    """In the child before exec: give up root's permission bypass (no-op for other users)."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def _cli(*argv: str, preexec: Callable[[], None] | None = None) -> subprocess.CompletedProcess[str]:
    """``feedline ARGV``: in a real process when the child must be set up (``preexec``: dropped
    permissions, a file-size limit), else in this interpreter (the same front, the same faults
    of the file system; no interpreter start-up each time)."""
    if preexec is None:
        return run_cli(*argv)
    env = {**os.environ, "PYTHONPATH": SRC, "COLUMNS": "200"}
    env.pop("FEEDLINE_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "feedline", *argv], capture_output=True, text=True,
                          timeout=90, env=env, preexec_fn=preexec)


def _one_line(out: subprocess.CompletedProcess[str], code: int, *words: str) -> str:
    assert out.returncode == code, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr, out.stderr
    lines = [line for line in out.stderr.splitlines() if not line.startswith("feedline: warning:")]
    assert len(lines) == 1 and lines[0].startswith("feedline: error:"), out.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def _source(root: Path, n: int = 12, size: int = 20_000) -> Path:
    root.mkdir(parents=True)
    for i in range(n):
        (root / f"{i:04d}.bin").write_bytes(os.urandom(size))
        (root / f"{i:04d}.json").write_bytes(b'{"i": %d}' % i)
    return root


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[tuple[Path, Callable[[], None] | None]]:
    """A folder on a file system with 256 KiB of room, and a child set-up (or None)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    mounted = os.geteuid() == 0 and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True).returncode == 0
    if mounted:
        try:
            yield mnt, None
        finally:
            subprocess.run(["umount", "-l", str(mnt)], check=False)
        return

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 10, 256 << 10))

    yield mnt, limit


def test_pack_onto_a_full_file_system_is_one_line_and_leaves_no_partial_files(
    tmp_path: Path, full_disk: tuple[Path, Callable[[], None] | None]
) -> None:
    mnt, preexec = full_disk
    src = _source(tmp_path / "src", n=30)  # 600 KB: does not fit
    out = mnt / "ds"
    line = _one_line(_cli("pack", str(src), "--out", str(out), "--shard-size", "128KiB", "-q", preexec=preexec), 1,
                     str(out / "shard-"))
    assert "No space left on device" in line or "File too large" in line
    assert not (out / MANIFEST_NAME).exists()
    assert not [p.name for p in out.iterdir() if p.name.endswith(".partial")]


def test_pack_into_a_read_only_folder_and_index_into_one(tmp_path: Path) -> None:
    src = _source(tmp_path / "src")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        _one_line(_cli("pack", str(src), "--out", str(ro / "ds"), preexec=_drop_dac), 1,
                  "Permission denied", str(ro / "ds"), "Fix:")
        ok = _cli("pack", str(src), "--out", str(tmp_path / "ds"), "-q")
        assert ok.returncode == 0, ok.stderr
        tars = sorted(str(p) for p in (tmp_path / "ds").glob("*.tar"))
        _one_line(_cli("index", *tars, "--out", str(ro), preexec=_drop_dac), 1, "Permission denied", str(ro))
    finally:
        ro.chmod(0o755)


def test_an_unreadable_subfolder_is_one_line_naming_it(tmp_path: Path) -> None:
    src = _source(tmp_path / "src")
    locked = src / "locked"
    locked.mkdir()
    (locked / "x.bin").write_bytes(b"1")
    locked.chmod(0)
    try:
        _one_line(_cli("pack", str(src), "--out", str(tmp_path / "ds"), preexec=_drop_dac), 1,
                  "Permission denied", str(locked))
    finally:
        locked.chmod(0o755)
    assert not (tmp_path / "ds" / MANIFEST_NAME).exists()


def test_an_unreadable_file_is_a_runtime_error_naming_it(tmp_path: Path) -> None:
    src = _source(tmp_path / "src")
    locked = src / "0003.bin"
    locked.chmod(0)
    try:
        _one_line(_cli("pack", str(src), "--out", str(tmp_path / "ds"), "-q", preexec=_drop_dac), 1,
                  "cannot read", str(locked), "Permission denied")
    finally:
        locked.chmod(0o644)
    assert not (tmp_path / "ds" / MANIFEST_NAME).exists()


def test_a_symlink_loop_and_an_out_that_is_a_file_are_argument_errors(tmp_path: Path) -> None:
    src = _source(tmp_path / "src")
    os.symlink("loop.bin", src / "loop.bin")
    _one_line(_cli("pack", str(src), "--out", str(tmp_path / "ds")), 2, "symbolic-link loop", "loop.bin")
    (src / "loop.bin").unlink()
    (tmp_path / "file").write_text("x")
    _one_line(_cli("pack", str(src), "--out", str(tmp_path / "file")), 2, "is a file")
    _one_line(_cli("index", str(tmp_path / "file"), "--out", str(tmp_path / "file")), 2, "is a file")


@pytest.mark.parametrize("cmd", [["inspect"], ["verify"], ["pack", "--out", "{tmp}/o"], ["index"],
                                 ["doctor", "--data"]])
def test_a_missing_path_says_it_does_not_exist(tmp_path: Path, cmd: list[str]) -> None:
    argv = [a.replace("{tmp}", str(tmp_path)) for a in cmd]
    line = _one_line(_cli(*argv, str(tmp_path / "nonexistent")), 2, "does not exist", "nonexistent")
    assert "Invalid value for" in line and "[field=" not in line, line  # doctor: "[field='data']"


@pytest.mark.parametrize("argv", [
    ["--shard-size", "10"],
    ["--shard-size", "lots"],
    ["--key", "first-dot"],
    ["--labels", "from-csv"],
    ["--align", "1000"],
    ["--json", "{tmp}/no/such/folder.json"],
])
def test_argument_errors_come_before_any_progress_output(tmp_path: Path, argv: list[str]) -> None:
    src = _source(tmp_path / "src", n=3)
    out = _cli("pack", str(src), "--out", str(tmp_path / "ds"), *[a.replace("{tmp}", str(tmp_path)) for a in argv])
    _one_line(out, 2)
    assert out.stdout == "" and "packing" not in out.stderr
    assert not (tmp_path / "ds").exists()


def test_shard_size_with_a_unit_below_1mib_warns(tmp_path: Path) -> None:
    src = _source(tmp_path / "src", n=3)
    out = _cli("pack", str(src), "--out", str(tmp_path / "ds"), "--shard-size", "64KiB", "-q")
    assert out.returncode == 0 and "below 1 MiB" in out.stderr


def test_packing_into_the_source_is_refused_and_under_it_survives_reruns(tmp_path: Path) -> None:
    src = _source(tmp_path / "src", n=5)
    _one_line(_cli("pack", str(src), "--out", str(src)), 2, "is the source folder")
    assert sorted(p.name for p in src.iterdir()) == sorted(f"{i:04d}.{e}" for i in range(5) for e in ("bin", "json"))
    for _ in range(3):
        out = _cli("pack", str(src), "--out", str(src / "packed"), "-q")
        assert out.returncode == 0, out.stderr
    assert read_manifest(src / "packed").num_samples == 5 and verify(src / "packed") == []


def test_json_takes_a_path_or_dash_for_every_shard_command(tmp_path: Path) -> None:
    src = _source(tmp_path / "src", n=4)
    ds = tmp_path / "ds"
    packed = _cli("pack", str(src), "--out", str(ds), "--json", "-")
    assert packed.returncode == 0, packed.stderr
    assert json.loads(packed.stdout)["num_samples"] == 4 and "packed" not in packed.stdout
    for cmd in ("inspect", "verify"):
        dest = tmp_path / f"{cmd}.json"
        to_file = _cli(cmd, str(ds), "--json", str(dest))
        assert to_file.returncode == 0 and to_file.stdout.strip(), to_file.stderr  # text still printed
        to_stdout = _cli(cmd, str(ds), "--json", "-")
        assert json.loads(to_stdout.stdout) == json.loads(dest.read_text())
    tars = sorted(str(p) for p in ds.glob("*.tar"))
    indexed = _cli("index", *tars, "--out", str(tmp_path / "meta"), "--json", "-")
    assert json.loads(indexed.stdout)["num_samples"] == 4


def test_imagefolder_in_one_command(tmp_path: Path) -> None:
    train = tmp_path / "train"
    for cls, names in {"cats": ["IMG_2023.01.05_1234.jpg", "IMG_2023.01.05_9999.JPEG"], "dogs": ["a.1.png"]}.items():
        (train / cls).mkdir(parents=True)
        for name in names:
            (train / cls / name).write_bytes(name.encode())
    (train / "README").write_text("hello")
    out = _cli("pack", str(train), "--out", str(tmp_path / "data"), "--labels", "from-folder")
    assert out.returncode == 0, out.stderr
    assert "packed 3 samples (3 files, 2 classes)" in out.stdout  # 3 images; the cls pack adds is no file
    assert "skipped 1 file(s) that fit no rule: README" in out.stderr
    assert "'jpg' (2) + 'png' (1) of 3" in out.stderr and "ImageTransform(('jpg', 'png')" in out.stderr
    shown = _cli("inspect", str(tmp_path / "data"))
    assert "classes   2 (cls label = index): 0=cats, 1=dogs" in shown.stdout
