"""A loader used in ways its author did not plan: from two threads at once, from a forked
child of the training process, over a dataset whose files are replaced while it is open,
and a training process killed by SIGTERM or SIGINT while process workers run.

What is guaranteed: a second thread iterating a loader another thread is in the middle of
gets a ConfigError (it used to end the other thread's pass silently, with batches
missing); a forked child gets a ConfigError instead of waiting forever for workers that do
not exist there, and its exit leaves the parent's workers running (multiprocessing's exit
hook used to SIGTERM them); a shard replaced by another file after the dataset was opened
is a ReadError naming it (before: the new bytes were read through the old index), and a
worker that reopens a dataset changed since the training process opened it refuses it.
Killed by a signal, the training process leaves no worker process, no traceback from the
workers and no arena behind.
"""

from __future__ import annotations

import multiprocessing.util
import os
import pickle
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from faults_helpers import Numbers, arenas

import feedline
from feedline.errors import ConfigError, FormatError, ReadError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from feedline.format import pack

    root = tmp_path_factory.mktemp("life")
    (root / "src").mkdir()
    for i in range(16):
        (root / "src" / f"s{i:02d}.bin").write_bytes(bytes([i]) * 4000)
    pack(root / "src", root / "data", shard_size=10 << 10)
    return root / "data"


@pytest.mark.timeout(60)
def test_a_second_thread_cannot_take_over_a_pass_in_progress() -> None:
    with feedline.Loader(Numbers(64), batch_size=4, workers=2, shuffle=False) as loader:
        it = iter(loader)
        first = next(it)  # this thread is in the middle of the pass
        errors: list[BaseException] = []

        def other() -> None:
            try:
                iter(loader)
            except ConfigError as e:
                errors.append(e)

        t = threading.Thread(target=other)
        t.start()
        t.join(30)
        assert errors and "another thread" in str(errors[0])
        rest = [b["y"].tolist() for b in it]  # the first thread's pass is intact
        assert first["y"].tolist() == [0, 1, 2, 3] and len(rest) == 15
        # once that pass is over (or dropped), another thread may iterate
        got: list[int] = []
        t = threading.Thread(target=lambda: got.extend(len(b["y"]) for b in loader))
        t.start()
        t.join(30)
        assert len(got) == 16


@pytest.mark.timeout(120)
@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_a_forked_child_cannot_use_the_loader_and_leaves_the_parents_workers(worker_type: str,
                                                                            tmp_path: Path) -> None:
    loader = feedline.Loader(Numbers(64), batch_size=4, workers=2, shuffle=False,
                             worker_type=worker_type, shm_dir=str(tmp_path))
    try:
        it = iter(loader)
        next(it)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: both uses are refused at once (they used to hang forever)
            os.close(read)
            said = []
            for use in (lambda: next(it), lambda: iter(loader)):
                try:
                    use()
                    said.append("no error")
                except ConfigError as e:
                    said.append("fork" if "fork" in str(e) else str(e))
                except BaseException as e:
                    said.append(repr(e))
            os.write(write, "|".join(said).encode())
            # what a normal exit of the child runs (pytest must not go on in it, so
            # the hooks are called here): multiprocessing's exit hook, then the loader's
            multiprocessing.util._exit_function()  # type: ignore[attr-defined]
            loader.close()
            os._exit(0)
        os.close(write)
        _, status = os.waitpid(pid, 0)
        with os.fdopen(read) as f:
            assert f.read() == "fork|fork" and os.waitstatus_to_exitcode(status) == 0
        rest = [b["y"].tolist() for b in it]  # the parent's workers are alive and well
        assert len(rest) == 15 and rest[-1] == [60, 61, 62, 63]
    finally:
        loader.close()


@pytest.mark.timeout(60)
def test_a_shard_replaced_after_open_is_a_read_error(dataset: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(dataset, copy)
    ds = feedline.open_dataset(copy, io="buffered")
    clean = bytes(ds[0]["bin"])
    shard = copy / ds.locate(len(ds) - 1)[0]
    data = bytearray(shard.read_bytes())
    data[1024:1100] = b"x" * 76  # same size, other bytes: a re-packed shard, synced by rsync
    shard.with_suffix(".new").write_bytes(bytes(data))
    os.replace(shard.with_suffix(".new"), shard)
    with pytest.raises(ReadError, match="replaced by another file") as info:
        ds.read_many([len(ds) - 1])
    assert info.value.shard == shard.name
    assert bytes(ds[0]["bin"]) == clean  # the shards left alone still read


@pytest.mark.timeout(60)
def test_a_worker_copy_refuses_a_dataset_changed_since_it_was_opened(dataset: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(dataset, copy)
    ds = feedline.open_dataset(copy)
    state = pickle.dumps(ds)  # what a process worker receives
    shard = copy / ds.locate(0)[0]
    shard.with_suffix(".new").write_bytes(shard.read_bytes())
    os.replace(shard.with_suffix(".new"), shard)  # the same bytes in another file (inode)
    worker_copy = pickle.loads(state)
    with pytest.raises(FormatError, match="changed on disk") as info:
        len(worker_copy)
    assert info.value.shard == shard.name
    assert len(pickle.loads(pickle.dumps(feedline.open_dataset(copy)))) == len(ds)  # reopened: fine


CHILD = """
import sys, time
import feedline
from faults_helpers import Numbers
if __name__ == "__main__":
    loader = feedline.Loader(Numbers(100000), batch_size=4, workers=2, worker_type="process",
                             shm_dir=sys.argv[1])
    for i, batch in enumerate(loader):
        if i == 3:
            print("iterating", flush=True)
        time.sleep(0.01)
"""


def _session(sid: int) -> list[str]:
    out = subprocess.run(["ps", "-e", "-o", "pid=,sid=,args="], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line.split()[1] == str(sid)]


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_training_process_killed_mid_epoch_leaves_nothing(sig: signal.Signals, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{Path(__file__).parent}"}
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout is not None and proc.stdout.readline().strip() == "iterating"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)  # returns once every worker closed its stderr
    assert proc.returncode == -sig
    deadline = time.monotonic() + 30
    while _session(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)  # the forkserver and workers notice their parent is gone
    assert _session(proc.pid) == [] and arenas(tmp_path) == []
    worker_noise = [line for line in err.splitlines() if "Error" in line and "KeyboardInterrupt" not in line]
    assert worker_noise == [], err[-2000:]
