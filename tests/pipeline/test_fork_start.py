"""``start_method="fork"``: workers forked from the training process, only where it is safe.

The runs that must fork happen in a fresh interpreter (a training script): pytest's own
process has pytest-timeout's timer thread alive, which is exactly a reason to refuse, and
that refusal is what the in-process test checks.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from loader_helpers import Numbers, batch_ids, make_packed

import feedline
from feedline.errors import ConfigError
from feedline.pipeline import forking

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r'''
import json, os, signal, sys, time
import numpy as np
import feedline

mode, ds, marker = sys.argv[1], sys.argv[2], sys.argv[3]


def on_term(signum, frame):  # the training script's own handler: never run by a worker
    with open(marker, "a") as f:
        f.write(f"{os.getpid()}\n")


signal.signal(signal.SIGTERM, on_term)


def make(kind, method="fork"):
    return feedline.Loader(ds, batch_size=8, workers=2, worker_type=kind, start_method=method,
                           shuffle=True, seed=3)


def take(loader, epochs=2, stop=None):
    got = []
    for epoch in range(loader.epoch, epochs):
        loader.set_epoch(epoch)
        for b in loader:
            got.append([b["__key__"], int(b["jpg"].sum()), b["cls"].tolist()])
            if stop is not None and len(got) == stop:
                return got
    return got


def pids(loader):
    return [p.pid for p in loader._rt.pool_workers._procs.values()]


if mode == "same":
    out = {}
    with make("thread") as loader:
        out["thread"] = take(loader)
    with make("process") as loader:
        out["fork"] = take(loader)
        out["stats"] = loader.stats["processes"]
        out["workers"] = pids(loader)
    with make("process") as loader:  # resume in the middle of epoch 0
        head = take(loader, stop=3)
        state = json.loads(json.dumps(loader.state_dict()))
    with make("process") as loader:
        loader.load_state_dict(state)
        out["resumed"] = head + take(loader)
        procs = loader._rt.pool_workers._procs
        victim = next(iter(procs.values()))
        os.kill(victim.pid, signal.SIGTERM)  # the parent's SIGTERM handler must not run there
        victim.join(10)
        # the loader's result thread reaps it too: a join whose waitpid lost that race returns
        # before the status is stored (read None once under load); it is stored a moment later
        deadline = time.monotonic() + 10
        while victim.exitcode is None and time.monotonic() < deadline:
            time.sleep(0.01)
        out["term_exitcode"] = victim.exitcode
    print("RESULT " + json.dumps(out), flush=True)
elif mode == "two":  # a validation loader started while the training loader's epoch runs
    with make("thread") as loader:
        want = take(loader)
    out = {"train": [], "val": []}
    with make("process") as train, make("process") as val:
        for epoch in range(2):
            train.set_epoch(epoch)
            for k, b in enumerate(train):  # its result thread is alive: val forks anyway
                out["train"].append([b["__key__"], int(b["jpg"].sum()), b["cls"].tolist()])
                if k == 1:
                    val.set_epoch(epoch)
                    out["val"] += [[b["__key__"], int(b["jpg"].sum()), b["cls"].tolist()] for b in val]
        out["stats"] = [train.stats["processes"], val.stats["processes"]]
    out["want"] = want
    print("RESULT " + json.dumps(out), flush=True)
else:  # "kill": report the workers, then wait to be SIGKILLed
    loader = make("process")
    it = iter(loader)
    next(it)
    print("RESULT " + json.dumps({"workers": pids(loader), "stats": loader.stats["processes"]}),
          flush=True)
    sys.stdin.read()
'''


def _script(tmp_path: Path, mode: str) -> tuple[subprocess.Popen[str], Path]:
    ds = make_packed(tmp_path / "data")
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    marker = tmp_path / "parent_handler_ran"
    env = {**os.environ, "PYTHONPATH": os.fspath(ROOT / "src")}
    proc = subprocess.Popen([sys.executable, os.fspath(script), mode, os.fspath(ds), os.fspath(marker)],
                            env=env, cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    return proc, marker


def _result(proc: subprocess.Popen[str]) -> dict:  # type: ignore[type-arg]
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("RESULT "):
            return json.loads(line[7:])  # type: ignore[no-any-return]
    proc.wait(30)
    assert proc.stderr is not None
    raise AssertionError(f"no result (exit {proc.returncode}):\n{proc.stderr.read()[-3000:]}")


def _run_script(tmp_path: Path, mode: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``train.py MODE`` to its end (not ``kill``, which waits to be killed)."""
    proc, marker = _script(tmp_path, mode)
    out, err = proc.communicate(timeout=100)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), marker


def _last_result(proc: subprocess.CompletedProcess[str]) -> dict:  # type: ignore[type-arg]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, f"no result (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    return json.loads(lines[-1][7:])  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The module's training scripts that run to their end, each a fresh interpreter, two at
    a time (they check which start method was used and what the workers gave, not timings).
    All have ended, and the pool's threads with them, before any test reads them: the
    in-process tests below count this process's threads."""
    jobs = {"same": lambda: _run_script(tmp_path_factory.mktemp("same"), "same"),
            "two": lambda: _run_script(tmp_path_factory.mktemp("two"), "two"),
            "tqdm": lambda: _python(tmp_path_factory.mktemp("tqdm"), TQDM_SCRIPT),
            "sigchld": lambda: _python(tmp_path_factory.mktemp("sigchld"), SIGCHLD_SCRIPT),
            "omp": lambda: _python(tmp_path_factory.mktemp("omp"), OPENMP_SCRIPT)}
    torch_dir = tmp_path_factory.mktemp("torch_sigchld")
    (torch_dir / "train.py").write_text(SIGCHLD_SCRIPT)
    for mode in ("alone", "wrapped"):
        jobs[f"torch_{mode}"] = (lambda m=mode: _python(torch_dir, TORCH_SIGCHLD_SCRIPT, m,
                                                        name="torch_first.py"))
    with ThreadPoolExecutor(max_workers=2) as pool:
        futs = {k: pool.submit(job) for k, job in jobs.items()}
    return {k: f.result() for k, f in futs.items()}


def _python(cwd: Path, text: str, *args: str, name: str = "script.py"
            ) -> subprocess.CompletedProcess[str]:
    script = cwd / name
    script.write_text(text)
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True,
                          cwd=cwd, timeout=100, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})


@pytest.mark.timeout(300)  # the module's scripts, two at a time
def test_forked_workers_give_the_thread_batches_resume_and_ignore_the_parents_handlers(
        runs: dict) -> None:
    proc, marker = runs["same"]
    out = _last_result(proc)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert out["stats"]["start_method"] == "fork", out["stats"]
    assert out["stats"]["why_not_fork"] is None
    assert out["thread"] and out["fork"] == out["thread"]  # keys, pixels, labels, order
    assert out["resumed"] == out["thread"]
    assert out["term_exitcode"] == -signal.SIGTERM  # died of it: the default action
    assert not marker.exists(), marker.read_text()  # the parent's handler never ran in a worker
    assert all(not _alive(pid) for pid in out["workers"])  # closed loaders left no worker


@pytest.mark.timeout(300)  # the module's scripts, two at a time
def test_a_second_loader_forks_while_the_first_ones_results_thread_runs(runs: dict) -> None:
    # train + validation loaders: before, the training loader's result thread made the
    # validation loader fall back to the forkserver (~0.9 CPU-s more, and a script without
    # a __main__ guard, like this one, died there)
    proc, _ = runs["two"]
    out = _last_result(proc)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for stats in out["stats"]:
        assert stats["start_method"] == "fork" and stats["why_not_fork"] is None, stats
    assert out["train"] == out["want"] and out["val"] == out["want"]


def test_the_fork_gate_holds_feedline_threads_out_of_their_work() -> None:
    gate = forking.ForkGate()
    inside, leave, entered = threading.Event(), threading.Event(), threading.Event()

    def busy() -> None:
        with gate.working():
            inside.set()
            leave.wait(30)

    def late() -> None:
        with gate.working():
            entered.set()

    worker = threading.Thread(target=busy, daemon=True)
    worker.start()
    assert inside.wait(30)
    with gate.stopped(timeout=0.1) as held:
        assert held is False  # a thread still working: no fork
    leave.set()
    worker.join(30)
    with gate.stopped(timeout=30) as held:
        assert held is True
        waiter = threading.Thread(target=late, daemon=True)
        waiter.start()
        assert not entered.wait(0.2)  # kept out while the fork is made
    assert entered.wait(30)
    waiter.join(30)


@pytest.mark.timeout(60)
def test_forked_workers_die_with_a_killed_parent_and_leave_no_shm(tmp_path: Path) -> None:
    proc, _ = _script(tmp_path, "kill")
    out = _result(proc)
    assert out["stats"]["start_method"] == "fork", out["stats"]
    fds = [os.pidfd_open(pid) for pid in out["workers"]]
    try:
        proc.kill()
        proc.wait(30)
        for fd in fds:  # readable once the worker has exited (poll: a full suite's fds pass 1,024)
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            assert poller.poll(20_000), "a forked worker outlived its SIGKILLed parent"
    finally:
        for fd in fds:
            os.close(fd)
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        proc.stdin.close(), proc.stdout.close(), proc.stderr.close()
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(f"feedline-{proc.pid}-")]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"


def test_fork_falls_back_to_the_forkserver_while_another_thread_runs() -> None:
    done = threading.Event()
    other = threading.Thread(target=done.wait, name="metrics-uploader", daemon=True)
    other.start()
    try:
        with feedline.Loader(Numbers(32), batch_size=8, workers=2, worker_type="process",
                             start_method="fork", shuffle=False) as loader:
            got = [batch_ids(b) for b in loader]
            stats = loader.stats["processes"]
    finally:
        done.set()
        other.join()
    assert got == [list(range(i, i + 8)) for i in range(0, 32, 8)]
    assert stats["asked"] == "fork" and stats["start_method"] == "forkserver"
    why = stats["why_not_fork"]
    listed = int(re.match(r"(\d+) other thread", why).group(1)) <= forking.SHOWN  # else a full run's leftovers
    assert "metrics-uploader" in why or not listed, why


def test_refusal_names_what_makes_fork_unsafe() -> None:
    done = threading.Event()
    other = threading.Thread(target=done.wait, name="checkpointer", daemon=True)
    other.start()
    try:
        why = forking.refusal()
    finally:
        done.set()
        other.join()
    assert why is not None and "checkpointer" in why and "lock" in why


def test_tqdms_parked_monitor_is_no_reason_to_refuse() -> None:
    tqdm = pytest.importorskip("tqdm").tqdm
    bar = tqdm(total=3, file=open(os.devnull, "w"))  # noqa: SIM115 (closed with the bar)
    try:
        monitor = tqdm.monitor
        assert monitor is not None and monitor.is_alive()
        deadline = time.monotonic() + 10
        while not forking._parked_monitor(monitor):  # it parks right after its start
            assert time.monotonic() < deadline, "tqdm's monitor never parked in its wait"
        # refusal() itself is checked in a fresh interpreter (TQDM_SCRIPT): here earlier
        # tests may have left other threads, or another monitor awake, under the same name
    finally:
        bar.fp.close()
        bar.close()
    def others_alive() -> int:  # the count refusal() gives (the list it shows is cut at forking.SHOWN)
        found = re.match(r"(\d+) other thread", forking.refusal() or "")
        return int(found.group(1)) if found else 0

    before = others_alive()
    done = threading.Event()
    other = threading.Thread(target=done.wait, name="tqdm_monitor", daemon=True)  # the name alone
    other.start()
    try:
        assert not forking._parked_monitor(other) and others_alive() == before + 1
    finally:
        done.set()
        other.join()


TQDM_SCRIPT = r"""
import json
import numpy as np
import feedline
from tqdm import tqdm


class DS:
    def __len__(self):
        return 32

    def __getitem__(self, i):
        return {"v": np.int64(i)}


if __name__ == "__main__":
    loader = feedline.Loader(DS(), batch_size=8, workers=2, worker_type="process", shuffle=False)
    with open("/dev/null", "w") as null:
        got = [b["v"].tolist() for b in tqdm(loader, file=null)]  # the monitor starts first
    print(json.dumps({"got": got, **loader.stats["processes"]}))
    loader.close()
"""


@pytest.mark.timeout(300)  # the module's scripts, two at a time
def test_a_training_loop_under_tqdm_forks(runs: dict) -> None:
    # before: tqdm's monitor thread, started by `tqdm(loader)` before the workers, made every
    # such script use the forkserver (0.9 s to start instead of 0.017 s, and a dataset that
    # does not pickle failed)
    proc = runs["tqdm"]
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["start_method"] == "fork", out["why_not_fork"]
    assert out["got"] == [list(range(i, i + 8)) for i in range(0, 32, 8)]


SIGCHLD_SCRIPT = r"""
import json, os, signal
import numpy as np
import feedline
from feedline.errors import WorkerDied


class Dies:
    def __len__(self):
        return 64

    def __getitem__(self, i):
        if i == 20:
            os.kill(os.getpid(), signal.SIGKILL)
        return {"v": np.int64(i)}


def reap(signum, frame):  # a server's handler: takes every child's status
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def run_dies():
    # a process loader over Dies: the error its killed worker gave, and how it started
    loader = feedline.Loader(Dies(), batch_size=4, workers=2, worker_type="process", shuffle=False)
    try:
        for _ in loader:
            pass
        error = None
    except WorkerDied as exc:
        error = [exc.signal, str(exc)]
    loader.close()  # raised ValueError on a worker the script had reaped
    return {"error": error, **loader.stats["processes"]}


if __name__ == "__main__":
    out = {}
    for mode, disposition in (("ignored", signal.SIG_IGN), ("handled", reap)):
        signal.signal(signal.SIGCHLD, disposition)
        out[mode] = run_dies()
    print(json.dumps(out))
"""


@pytest.mark.timeout(300)  # the module's scripts, two at a time
def test_fork_is_refused_while_sigchld_is_ignored_or_handled(runs: dict) -> None:
    # Before: forked workers were auto-reaped (SIG_IGN) or reaped by the script's handler, so a
    # SIGKILLed worker was "exited with code None" and Loader.close() raised a raw ValueError.
    proc = runs["sigchld"]
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for mode in ("ignored", "handled"):
        assert out[mode]["asked"] == "fork" and out[mode]["start_method"] == "forkserver"
        assert f"SIGCHLD is {mode}" in out[mode]["why_not_fork"]
        assert out[mode]["error"][0] == "SIGKILL", out[mode]["error"]


TORCH_SIGCHLD_SCRIPT = r"""
import json, os, signal, sys
from torch.utils.data import DataLoader
from torch.utils.data._utils import signal_handling

sys.path.insert(0, os.getcwd())
from train import reap, run_dies

if __name__ == "__main__":
    if sys.argv[1] == "wrapped":  # torch's handler around a script's reaping one: refused
        signal.signal(signal.SIGCHLD, reap)
    list(DataLoader(list(range(8)), batch_size=4, num_workers=2))  # installs torch's handler
    assert signal.getsignal(signal.SIGCHLD).__module__ == signal_handling.__name__
    print(json.dumps(run_dies()))
"""


@pytest.mark.timeout(300)  # the module's scripts, two at a time
def test_torch_dataloaders_sigchld_handler_does_not_refuse_the_fork(runs: dict) -> None:
    # Before: the handler a DataLoader with workers leaves installed made every later process
    # Loader of the script start through the forkserver (first batch 0.3 s -> 1.7-9 s).
    procs = {mode: runs[f"torch_{mode}"] for mode in ("alone", "wrapped")}
    out = {}
    for mode, proc in procs.items():
        assert proc.returncode == 0, proc.stderr[-2000:]
        out[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
        assert out[mode]["error"][0] == "SIGKILL", out[mode]["error"]  # the status was not taken
    assert out["alone"]["start_method"] == "fork", out["alone"]["why_not_fork"]
    assert out["wrapped"]["start_method"] == "forkserver"
    assert "SIGCHLD is handled" in out["wrapped"]["why_not_fork"]


def test_an_unknown_start_method_names_the_three() -> None:
    with pytest.raises(ConfigError, match='"forkserver", "spawn" or "fork"'):
        feedline.Loader(Numbers(8), batch_size=4, worker_type="process", start_method="vfork")


OPENMP_SCRIPT = r'''
import numpy as np, torch, feedline


class Matmuls:
    """Each sample runs torch's intra-op pool (a matmul big enough to go parallel)."""

    def __len__(self):
        return 16

    def __getitem__(self, i):
        x = torch.randn(64, 128, 128)
        y = (x @ x.transpose(1, 2)).sum()
        return {"y": np.float32(y), "threads": np.int64(torch.get_num_threads())}


if __name__ == "__main__":
    torch.set_num_threads(2)
    a = torch.randn(1000, 1000)
    for _ in range(3):
        a = a @ a / 1000  # the parent has started its OpenMP pool before the fork
    loader = feedline.Loader(Matmuls(), batch_size=4, workers=2, worker_type="process",
                             start_method="fork", shuffle=False, device="cpu")
    threads = {int(t) for b in loader for t in b["threads"]}
    assert loader.stats["processes"]["start_method"] == "fork", loader.stats["processes"]
    print("worker threads", sorted(threads))
'''


@pytest.mark.timeout(300)  # the module's scripts, two at a time
def test_forked_workers_run_torch_ops_on_one_thread_after_the_parent_used_its_pool(
        runs: dict) -> None:
    """A forked worker entering the OpenMP pool its parent had started hung for ever (the
    pool's threads are not forked with it); workers run torch ops on one thread, as torch
    DataLoader's do."""
    proc = runs["omp"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "worker threads [1]" in proc.stdout
