"""worker_type="auto" where processes cannot run: it stays on threads, says
why in stats["auto"], and the batches are those of threads. Each case forces the rule to
pick processes (every measure reads GIL-bound, however short the epoch)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from loader_helpers import Numbers, batch_ids

import feedline
from feedline.pipeline import auto
from feedline.pipeline.main_script import _guarded_blocks, unguarded_main


@pytest.fixture
def processes_wanted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(auto, "GIL_HELD", (-1.0, 2.0))  # the probe never decides
    monkeypatch.setattr(auto, "GIL_BOUND", 100.0)  # every share: GIL-bound
    monkeypatch.setattr(auto, "SHORT_PASS_SECONDS", 0.0)


def _epoch(**kw: Any) -> tuple[list[list[int]], dict[str, Any]]:
    kw.setdefault("worker_type", "auto")
    with feedline.Loader(Numbers(64), batch_size=2, seed=3, drop_last=False, **kw) as loader:
        got = [batch_ids(b) for b in loader]
        assert loader._rt.settle(60)
        return got, loader.stats


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", ["transform", "shm"])
def test_processes_that_cannot_start_leave_it_on_threads(processes_wanted: None, case: str,
                                                         tmp_path: Path) -> None:
    """A transform that does not pickle (a lambda); no usable shared-memory folder."""
    want, _ = _epoch(workers=2, worker_type="thread")
    kw: dict[str, Any] = ({"transform": lambda s: s} if case == "transform"
                          else {"shm_dir": str(tmp_path / "missing")})
    got, stats = _epoch(workers=2, **kw)
    assert got == want
    assert stats["worker_type"] == "thread" and stats["auto"]["chosen"] == "thread"
    assert "could not start" in stats["auto"]["why"], stats["auto"]


def test_one_worker_stays_on_threads(processes_wanted: None) -> None:
    _, stats = _epoch(workers=1)
    assert stats["worker_type"] == "thread" and "one worker" in stats["auto"]["why"]


def test_the_guard_is_read_from_the_scripts_source(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("import x\nrun()\nif __name__ == '__main__':\n    main()\n    more()\n"
                      "if '__main__' == __name__:\n    again()\nif True:\n    other()\n")
    assert _guarded_blocks(str(script)) == [(3, 5), (6, 7)]
    script.write_text("def broken(:\n")
    assert _guarded_blocks(str(script)) is None  # unreadable: not judged
    assert unguarded_main() is None  # pytest's own entry point runs under its guard


SCRIPT = """
import numpy as np, feedline
from feedline.pipeline import auto
auto.GIL_HELD, auto.GIL_BOUND, auto.SHORT_PASS_SECONDS = (-1.0, 2.0), 100.0, 0.0
class Data:
    def __len__(self): return 64
    def __getitem__(self, i): return {'x': np.full(2, i, np.float32)}
loader = feedline.Loader(Data(), batch_size=2, workers=2, shuffle=False, worker_type='auto')
print('EPOCH', sum(int(b['x'][0, 0]) for b in loader), flush=True)
loader._rt.settle(60)
print('KIND', loader.stats['worker_type'], 'WHY', loader.stats['auto']['why'], flush=True)
"""


@pytest.mark.timeout(60)
def test_a_script_from_stdin_with_its_classes_in_main_stays_on_threads() -> None:
    """``python - < train.py`` (or ``-c``, a notebook): the workers cannot import a
    ``__main__`` without a file, so the dataset defined there would not load in them."""
    env = {**os.environ, "PYTHONPATH": str(Path(feedline.__file__).resolve().parents[1])}
    run = subprocess.run([sys.executable, "-"], input=SCRIPT, capture_output=True, text=True,
                         timeout=50, env=env)
    assert run.returncode == 0, run.stderr
    assert f"EPOCH {sum(range(0, 64, 2))}" in run.stdout, run.stdout
    assert "KIND thread" in run.stdout and "not a file" in run.stdout, run.stdout
    assert "Traceback" not in run.stderr, run.stderr  # no worker started and died


def test_the_same_script_under_the_guard_moves_to_processes(tmp_path: Path) -> None:
    """The same script under the guard moves to processes (its batches unchanged)."""
    script = tmp_path / "train.py"
    body = SCRIPT.strip().splitlines()
    script.write_text("\n".join(body[:7] + ["if __name__ == '__main__':"] + ["    " + x for x in body[7:]]))
    env = {**os.environ, "PYTHONPATH": str(Path(feedline.__file__).resolve().parents[1])}
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=100, env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert f"EPOCH {sum(range(0, 64, 2))}" in run.stdout and "KIND process" in run.stdout, run.stdout


@pytest.mark.timeout(60)
def test_a_dataset_defined_in_a_main_without_a_file_stays_on_threads() -> None:
    """``python -c`` (a notebook alike): the workers do not import such a ``__main__``."""
    env = {**os.environ, "PYTHONPATH": str(Path(feedline.__file__).resolve().parents[1])}
    run = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         timeout=50, env=env)
    assert run.returncode == 0, run.stderr
    assert "KIND thread" in run.stdout and "has no file" in run.stdout, run.stdout
    assert "Traceback" not in run.stderr, run.stderr
