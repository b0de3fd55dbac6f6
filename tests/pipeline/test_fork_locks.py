"""A forked worker that waits for ever on a lock it inherited held is an error naming the line
and the forkserver, within a second or two, not a LoaderTimeout or a silent hang
(:mod:`feedline.pipeline.inherited_locks`).

Run in a fresh interpreter: pytest's process has pytest-timeout's timer thread alive, and
the loader would not fork there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r'''
import json, multiprocessing, sys, threading, time
import numpy as np
import feedline

LOCK = threading.Lock()
SHARED = multiprocessing.Lock()  # a lock the worker shares with this process: never "stuck"


class Cached:
    def __init__(self, lock):
        self.lock = lock

    def __len__(self):
        return 32

    def __getitem__(self, i):
        with self.lock:  # LINE-OF-THE-LOCK
            return np.full(4, i, np.float32)


def first_batch(lock, release_after=None):
    loader = feedline.Loader(Cached(lock), batch_size=8, workers=2, worker_type="process",
                             shuffle=False, timeout=30)
    lock.acquire()  # held by the thread that forks the workers
    it = iter(loader)
    if release_after is not None:
        threading.Timer(release_after, lock.release).start()  # a thread after the fork
    t0 = time.monotonic()
    try:
        out = {"got": next(it)[:, 0].tolist()}
    except Exception as exc:
        out = {"type": type(exc).__name__, "stage": getattr(exc, "stage", None),
               "message": str(exc), "stack": getattr(exc, "traceback_text", None)}
    out["seconds"] = time.monotonic() - t0
    out["start_method"] = loader.stats["processes"]["start_method"]
    if release_after is None:
        lock.release()
    loader.close()
    return out


if __name__ == "__main__":
    results = {"inherited": first_batch(LOCK), "shared": first_batch(SHARED, release_after=2.5)}
    print("RESULT " + json.dumps(results))
'''


@pytest.mark.timeout(150)
def test_a_worker_forked_with_a_held_lock_is_named_and_a_shared_lock_is_waited_for(
        tmp_path: Path) -> None:
    # before: the first batch waited the whole timeout= (30 s here) and raised LoaderTimeout
    # "batch 0 not ready", fix "raise timeout="; without timeout= it hung for ever
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    line = next(n for n, text in enumerate(SCRIPT.splitlines(), 1) if "LINE-OF-THE-LOCK" in text)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path,
                          timeout=140, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))[7:])
    held, shared = out["inherited"], out["shared"]
    assert held["start_method"] == shared["start_method"] == "fork"
    assert (held["type"], held["stage"]) == ("WorkerError", "fork"), held
    assert f"train.py:{line} in __getitem__" in held["message"]
    assert 'start_method="forkserver"' in held["message"]
    assert "in __getitem__" in held["stack"]
    assert held["seconds"] < 20, held  # found while waiting, long before timeout=
    # a worker waiting on a lock another process can release is only slow: the batch comes
    assert shared.get("got") == list(range(8)), shared
    assert shared["seconds"] >= 2.0
