"""A low open-file limit (``ulimit -n 64``, common in containers; 1,024 is the usual
default) against a dataset of many more shards than that.

Real processes under a real ``RLIMIT_NOFILE``: a loader with thread or process workers
reads a whole epoch of 200 one-sample shards. Before: every shard's descriptor stayed
open once read, and the epoch died with "Too many open files" (and a fix saying to fix
the sample). Now a dataset keeps at most a quarter of the limit open
(:mod:`feedline.io._handles`), and a process out of descriptors for other reasons gets a
``ResourceError`` naming ``ulimit -n``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from feedline.format import pack

ROOT = Path(__file__).resolve().parents[2]

EPOCH = r"""
import os, resource, sys
import feedline

def shard_fds():
    names = []
    for n in os.listdir("/proc/self/fd"):
        try:
            names.append(os.readlink(f"/proc/self/fd/{n}"))
        except OSError:
            pass  # the descriptor of the listing itself, closed since
    return [n for n in names if n.endswith(".tar")]

def main():
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    ds = feedline.open_dataset(sys.argv[1])
    loader = feedline.Loader(ds, batch_size=10, workers=2, worker_type=sys.argv[2], shuffle=True)
    seen = []
    for batch in loader:
        seen += list(batch["__key__"])
    loader.close()
    print("SHARD_FDS", len(shard_fds()))
    print("SAMPLES", len(seen), len(set(seen)))

if __name__ == "__main__":
    main()
"""


@pytest.fixture(scope="module")
def many_shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("nofile")
    src = root / "src"
    src.mkdir()
    for i in range(200):
        (src / f"s{i:04d}.bin").write_bytes(os.urandom(700))
    pack(src, root / "ds", shard_size=1024)  # one sample per shard: 200 shards
    assert len(list((root / "ds").glob("*.tar"))) == 200
    return root / "ds"


def _run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True,
                          text=True, timeout=100)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("worker_type", ["thread", pytest.param("process", marks=pytest.mark.slow)])
def test_an_epoch_over_200_shards_under_ulimit_64(many_shards: Path, worker_type: str) -> None:
    res = _run(EPOCH, str(many_shards), worker_type)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "SAMPLES 200 200" in res.stdout  # every sample once (drop_last drops none: 200 = 20 x 10)
    # the training process itself holds at most the budget (64 // 4) of shard descriptors
    held = int(res.stdout.split("SHARD_FDS")[1].split()[0])
    assert held <= 16, res.stdout


EXHAUSTED = r"""
import os, sys
import feedline
from feedline.errors import ResourceError

ds = feedline.open_dataset(sys.argv[1])
other = feedline.open_dataset(sys.argv[1])
len(other)                             # its catalog is loaded; it holds no shard handle
ds[0]                                  # shard 0's handle is open, and idle
held = []
try:
    while True:
        held.append(os.open(os.devnull, os.O_RDONLY))
except OSError:
    pass                               # no descriptor left in this process
print("READ1", ds[1]["__key__"])       # room made by closing shard 0's idle handle
try:
    other[2]                           # nothing idle to close in this dataset
except ResourceError as e:
    print("RESOURCE", e)
except Exception as e:
    print("OTHER", type(e).__name__, e)
"""


@pytest.mark.timeout(60)
def test_a_process_out_of_descriptors_closes_idle_handles_then_says_ulimit(many_shards: Path) -> None:
    res = _run(EXHAUSTED, str(many_shards))
    assert res.returncode == 0, res.stderr[-3000:]
    assert "READ1 s0001" in res.stdout, res.stdout + res.stderr[-2000:]
    assert "RESOURCE" in res.stdout and "ulimit -n" in res.stdout, res.stdout + res.stderr[-2000:]


THREADS = r"""
import os, random, resource, sys, threading
import feedline

resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[2]), int(sys.argv[2])))  # budget: limit // 4
ds = feedline.open_dataset(sys.argv[1], verify=True)   # every field checked against its checksum
want = {i: bytes(ds[i]["bin"]) for i in range(len(ds))}
errors = []

def reader(seed):
    rng = random.Random(seed)
    try:
        for _ in range(int(sys.argv[3])):
            picks = rng.sample(range(len(ds)), 8)
            for i, s in zip(picks, ds.read_many(picks)):
                assert bytes(s["bin"]) == want[i], i
    except BaseException as e:
        errors.append(repr(e))

threads = [threading.Thread(target=reader, args=(k,)) for k in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print("ERRORS", len(errors), errors[:3])
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("limit,rounds", [(16, 60), pytest.param(32, 2000, marks=pytest.mark.slow)])
def test_eight_threads_over_a_small_handle_budget_read_every_byte_right(
        many_shards: Path, limit: int, rounds: int) -> None:
    """Handles closed to make room while other threads read: a read holds its handle
    (``ShardReadState.lease``), so none is closed under it (verify=True would catch
    bytes read from a reused descriptor)."""
    res = _run(THREADS, str(many_shards), str(limit), str(rounds))
    assert res.returncode == 0, res.stderr[-3000:]
    assert "ERRORS 0 []" in res.stdout, res.stdout[-2000:]


TOO_MANY_WORKERS = r"""
import os, resource, sys
sys.path.insert(0, sys.argv[1])
from faults_helpers import Numbers, arenas
import psutil
import feedline
from feedline.errors import ResourceError

def main():
    limits = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (24, limits[1]))
    loader = feedline.Loader(Numbers(64), batch_size=4, workers=16, worker_type="process")
    try:
        next(iter(loader))
    except ResourceError as e:
        print("RESOURCE", e.field, "|", e)
    loader.close()
    resource.setrlimit(resource.RLIMIT_NOFILE, limits)  # room for psutil to look
    me = psutil.Process()
    direct = {p.pid for p in me.children()}  # the forkserver and resource tracker
    workers = []  # the forkserver's children: process workers
    for p in me.children(recursive=True):
        try:
            if p.pid not in direct and p.status() != psutil.STATUS_ZOMBIE:
                workers.append(p.pid)
        except psutil.NoSuchProcess:
            pass
    print("WORKERS_LEFT", len(workers), "ARENAS", arenas("/dev/shm"), workers)

if __name__ == "__main__":
    main()
"""


@pytest.mark.slow  # starts a forkserver (imports torch): several seconds
@pytest.mark.timeout(120)
def test_more_process_workers_than_descriptors_is_a_resource_error(tmp_path: Path) -> None:
    script = tmp_path / "train.py"  # a file: workers import it
    script.write_text(TOO_MANY_WORKERS)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    res = subprocess.run([sys.executable, str(script), str(Path(__file__).parent)], env=env,
                         capture_output=True, text=True, timeout=110)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "RESOURCE workers |" in res.stdout and "ulimit -n" in res.stdout, res.stdout + res.stderr[-2000:]
    assert "WORKERS_LEFT 0 ARENAS [] []" in res.stdout, res.stdout
