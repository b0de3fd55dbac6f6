"""pack, index and the CLI under OS faults: full disk (RLIMIT_FSIZE in a real CLI
process), missing paths, bad arguments, a damaged dataset; runtime errors exit 1 with
one line naming the place, argument errors exit 2, never a traceback. diagnose passes
the training command's exit status through."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

import feedline
from cli_inproc import run_cli

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str, fsize: int | None = None, cwd: Path | None = None
         ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}

    def limit() -> None:
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.run([sys.executable, "-m", "feedline", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=200, preexec_fn=limit)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    for i in range(30):
        (src / f"s{i:02d}.bin").write_bytes(os.urandom(4000))
        (src / f"s{i:02d}.cls").write_text(str(i))
    return src


@pytest.mark.timeout(200)
def test_full_disk_during_pack_exits_1_and_leaves_no_dataset(source: Path,
                                                             tmp_path: Path) -> None:
    out = tmp_path / "out"
    res = _cli("pack", str(source), "--out", str(out), fsize=20_000)
    assert res.returncode == 1, res.stderr[-2000:]
    assert "Traceback" not in res.stderr and "shard-000000.tar" in res.stderr
    assert not (out / "manifest.json").exists()  # nothing half-written is a dataset
    # with room again the same command finishes and the result verifies
    assert _cli("pack", str(source), "--out", str(out)).returncode == 0
    assert _cli("verify", str(out)).returncode == 0
    assert len(feedline.open_dataset(out)) == 30


@pytest.mark.timeout(200)
def test_full_disk_during_a_rerun_never_leaves_a_mix(source: Path, tmp_path: Path) -> None:
    """A rerun that fails leaves either the old dataset, whole, or no manifest (the
    folder is then not a dataset until a rerun finishes): never old and new mixed."""
    out = tmp_path / "out"
    assert _cli("pack", str(source), "--out", str(out)).returncode == 0
    before = [bytes(s["bin"]) for s in feedline.open_dataset(out).read_many(list(range(30)))]
    (source / "s99.bin").write_bytes(os.urandom(300_000))  # the rerun must write more
    (source / "s99.cls").write_text("99")
    res = _cli("pack", str(source), "--out", str(out), fsize=100_000)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    if (out / "manifest.json").exists():
        ds = feedline.open_dataset(out)
        assert [bytes(s["bin"]) for s in ds.read_many(list(range(len(ds))))] == before
        assert _cli("verify", str(out)).returncode == 0
    else:
        assert _cli("verify", str(out)).returncode != 0
    assert _cli("pack", str(source), "--out", str(out)).returncode == 0
    assert len(feedline.open_dataset(out)) == 31 and run_cli("verify", str(out)).returncode == 0


@pytest.mark.parametrize(("args", "code", "words"), [
    (("pack", "{tmp}/nope", "--out", "{tmp}/x"), 2, "does not exist"),
    (("pack", "{src}", "--out", "{tmp}/x", "--shard-size", "banana"), 2, "shard-size"),
    (("verify", "{tmp}/nope"), 2, "does not exist"),
    (("inspect", "{tmp}/nope"), 2, "does not exist"),
    (("pack", "{src}", "--out", "{src}/s00.bin"), 2, "s00.bin"),
])
def test_cli_argument_faults_exit_2_with_one_line(source: Path, tmp_path: Path,
                                                  args: tuple[str, ...], code: int,
                                                  words: str) -> None:
    res = run_cli(*(a.format(tmp=tmp_path, src=source) for a in args))  # the front, in this interpreter
    assert res.returncode == code, (res.returncode, res.stderr[-1500:])
    assert words in res.stderr and "Traceback" not in res.stderr


@pytest.mark.timeout(200)
@pytest.mark.parametrize("status", [3, pytest.param(0, marks=pytest.mark.slow)])
def test_diagnose_passes_the_training_exit_status_through(tmp_path: Path,
                                                          status: int) -> None:
    train = tmp_path / "train.py"
    train.write_text(f"import sys\nsys.exit({status})\n")
    res = _cli("diagnose", "--quiet", "--", sys.executable, str(train), cwd=tmp_path)
    assert res.returncode == status, res.stderr[-1500:]
    assert "Traceback" not in res.stderr
