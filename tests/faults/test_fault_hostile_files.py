"""Files that are not what their name says: a FIFO, a device, a folder or a huge sparse
file where a dataset's manifest, index or shard belongs, and a FIFO as ``--json`` target.

What is guaranteed: opening, reading and verifying such a dataset never blocks on a
FIFO and never reads a device or an oversized file whole; each is a typed error naming
the shard or path, within seconds. ``--json`` to a FIFO nobody reads is exit 1 (one line),
to a FIFO that is read (bash's ``>(jq .)``) it works.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

import feedline
from feedline.errors import FeedlineError, FormatError, ReadError
from feedline.format import inspect, verify

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "feedline", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from feedline.format import pack

    root = tmp_path_factory.mktemp("hostile")
    src = root / "src"
    src.mkdir()
    for i in range(8):
        (src / f"s{i}.bin").write_bytes(os.urandom(3000 + i))
        (src / f"s{i}.cls").write_text(str(i % 3))
    pack(src, root / "data", shard_size=8 << 10)
    return root / "data"


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _dev_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def _folder(path: Path) -> None:
    path.mkdir()


def _sparse_4gib(path: Path) -> None:
    with open(path, "wb") as f:
        f.truncate(4 << 30)  # no blocks on disk; reading it whole would take 4 GiB


REPLACEMENTS: dict[str, Callable[[Path], None]] = {
    "fifo": _fifo, "dev_zero": _dev_zero, "folder": _folder, "sparse_4gib": _sparse_4gib,
}


def _replace(dataset: Path, tmp_path: Path, name: str, how: str) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(dataset, copy)
    os.unlink(copy / name)
    REPLACEMENTS[how](copy / name)
    return copy


@pytest.mark.timeout(30)
@pytest.mark.parametrize("how", sorted(REPLACEMENTS))
@pytest.mark.parametrize("name", ["manifest.json", "shard-000000.tar.idx", "shard-000000.tar"])
def test_a_non_file_in_a_dataset_is_a_typed_error(dataset: Path, tmp_path: Path, name: str,
                                                  how: str) -> None:
    copy = _replace(dataset, tmp_path, name, how)
    with pytest.raises(FormatError) as info:
        feedline.open_dataset(copy)
    assert "shard-000000.tar" in str(info.value) or "manifest.json" in str(info.value)
    for check in (verify, inspect):  # they must not block or read it whole either
        try:
            problems = check(copy)
        except FeedlineError:
            continue
        assert problems and check is verify, f"{check.__name__} accepted a {how} as {name}"


@pytest.mark.timeout(30)
def test_a_shard_that_turns_into_a_fifo_after_open_is_a_read_error(dataset: Path,
                                                                   tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(dataset, copy)
    ds = feedline.open_dataset(copy, io="buffered")
    os.unlink(copy / "shard-000000.tar")
    os.mkfifo(copy / "shard-000000.tar")  # replaced between open and the first read
    with pytest.raises(ReadError, match="not a regular file"):
        ds.read_many([0])


@pytest.mark.timeout(60)
def test_json_to_a_fifo_nobody_reads_exits_1_and_to_a_read_fifo_works(dataset: Path,
                                                                      tmp_path: Path) -> None:
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    res = _cli("inspect", str(dataset), "--json", str(fifo))
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert "no process reads this FIFO" in res.stderr

    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()  # opening for reading blocks until the CLI opens it for writing
    res = _cli("inspect", str(dataset), "--json", str(fifo))
    reader.join(30)
    assert res.returncode == 0, res.stderr
    assert json.loads(got[0])["num_samples"] == 8


@pytest.mark.parametrize("args", [
    ["pack", "SRC", "--out", "OUT", "--shard-size", "1e999"],
    ["doctor", "--batch-bytes", "1e999"],
    ["doctor", "--pinned-budget", "99999999999999999999999999TiB"],
])
@pytest.mark.timeout(60)
def test_sizes_that_overflow_are_argument_errors(dataset: Path, tmp_path: Path, args: list[str]) -> None:
    args = [str(dataset.parent / "src") if a == "SRC" else str(tmp_path / "o") if a == "OUT" else a
            for a in args]
    res = _cli(*args)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and "1 EiB" in res.stderr
