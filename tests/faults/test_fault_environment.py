"""The host changing under a run: the temporary folder deleted by a temp cleaner, shared
memory filled up by another process while process workers run.

What is guaranteed: a loader created after ``$TMPDIR`` was emptied (systemd-tmpfiles,
tmpreaper: multiprocessing's ``pymp-*`` folder, where the forkserver's socket lives)
starts its workers, and the loaders already running keep theirs (before: every new
process-worker loader failed with a bare ``FileNotFoundError``); an shm folder filled to
the last byte after the start does not disturb the loader (its arena is reserved with
``posix_fallocate`` at start, never grown).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HELPERS = Path(__file__).resolve().parent

TMP_GONE = r"""
import os, shutil, sys
sys.path.insert(0, sys.argv[1])
from faults_helpers import Numbers, ids
import feedline

def main():
    train = feedline.Loader(Numbers(64), batch_size=4, workers=2, worker_type="process", shuffle=False)
    it = iter(train)
    got = ids(next(it)) + ids(next(it))
    shutil.rmtree(os.environ["TMPDIR"])          # a temp cleaner empties $TMPDIR mid-run
    with feedline.Loader(Numbers(32), batch_size=4, workers=2, worker_type="process",
                         shuffle=False) as val:  # e.g. a validation loader made each epoch
        print("VAL", sum(len(ids(b)) for b in val))
    got += [i for b in it for i in ids(b)]       # the first loader's workers kept running
    print("TRAIN", sorted(got) == list(range(64)))
    train.close()

if __name__ == "__main__":
    main()
"""


@pytest.mark.slow  # two forkservers start, each importing torch: about 15 s on 2 busy cores
@pytest.mark.timeout(120)
def test_a_loader_made_after_tmpdir_was_emptied_starts_its_workers(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "TMPDIR": str(tmp)}
    res = subprocess.run([sys.executable, "-c", TMP_GONE, str(HELPERS)], env=env, capture_output=True,
                         text=True, timeout=110)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "VAL 32" in res.stdout and "TRAIN True" in res.stdout, res.stdout + res.stderr[-2000:]
    assert "Traceback" not in res.stderr, res.stderr[-3000:]


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "shm"
    mnt.mkdir()
    if shutil.which("mount") is None or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


SHM_FILLS = r"""
import os, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from faults_helpers import Numbers, arenas
import feedline

class Big(Numbers):
    def __getitem__(self, i):
        return {"x": np.full((64, 1024), i, np.float32), "y": i}   # 256 KiB a sample

def main():
    shm = sys.argv[2]
    with feedline.Loader(Big(128), batch_size=4, workers=2, worker_type="process", shm_dir=shm,
                         shuffle=False) as loader:
        seen = []
        for n, batch in enumerate(loader):
            seen += [int(v) for v in batch["y"].tolist()]
            assert all(float(batch["x"][k, 0, 0]) == v for k, v in enumerate(batch["y"].tolist()))
            if n == 1:   # another process fills the tmpfs to its last byte
                try:
                    with open(os.path.join(shm, "filler"), "wb") as f:
                        while True:
                            f.write(b"\1" * 65536)
                except OSError as e:
                    print("FULL", e.strerror)
        print("SEEN", sorted(seen) == list(range(128)))
    print("ARENAS", arenas(shm))

if __name__ == "__main__":
    main()
"""


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_shared_memory_filled_during_the_run_does_not_disturb_the_loader(small_tmpfs: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    script = small_tmpfs.parent / "train.py"  # a file: the workers import its Big class
    script.write_text(SHM_FILLS)
    res = subprocess.run([sys.executable, str(script), str(HELPERS), str(small_tmpfs)], env=env,
                         capture_output=True, text=True, timeout=110)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "FULL No space left on device" in res.stdout, res.stdout
    assert "SEEN True" in res.stdout and "ARENAS []" in res.stdout, res.stdout + res.stderr[-2000:]


AS_LIMIT = r"""
import resource, sys
sys.path.insert(0, sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))   # a memory-capped job
import numpy as np
from faults_helpers import Numbers
import feedline
from feedline.errors import WorkerError

class Hog(Numbers):
    def __getitem__(self, i):
        if i == 9:
            np.ones(5 << 30, np.uint8)                          # more than the cap
        return super().__getitem__(i)

try:
    with feedline.Loader(Hog(32), batch_size=4, workers=2, shuffle=False) as loader:
        for _ in loader:
            pass
except WorkerError as e:
    print("WORKERERROR", e.key, type(e.__cause__).__name__)
"""


@pytest.mark.timeout(60)
def test_a_sample_over_the_address_space_limit_is_a_worker_error_naming_it() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    res = subprocess.run([sys.executable, "-c", AS_LIMIT, str(HELPERS)], env=env, capture_output=True,
                         text=True, timeout=50)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "WORKERERROR 9 MemoryError" in res.stdout, res.stdout + res.stderr[-2000:]
