"""Round 12 of the seeded sweep (issue 13): resource limits, long runs and leaks, two
processes on one dataset folder, distributed arguments, and Ctrl-C as a batch dies.
``hostile_sweep.py`` adds these cases to its own (groups ``limits``, ``leaks``,
``concurrent``, ``distributed``, ``signals``); each ends in a clear error naming the thing
(and, for a limit, the setting to change) or a right result, as the others, with nothing
left behind: no worker process, no arena in the shared-memory folder.

Most cases run a short training script in a child process (a limit set with
``setrlimit``, a fork, real ranks), which prints ``CLEAR <error>`` for a ``FeedlineError``
and exits 3; a traceback of anything else, a hang or wrong data is a failure. The
``RLIMIT_NPROC`` cases need a user other than root (root is exempt from it): run as root,
they drop to ``nobody`` with ``setpriv``; elsewhere they are skipped and said so. The
small-tmpfs cases mount one (root), else skip.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

CaseFn = Callable[[Path], str]
ROOT = Path(__file__).resolve().parents[2]
FAULTS = Path(__file__).resolve().parent

PRELUDE = f"""
import gc, json, os, resource, sys, threading, time
sys.path[:0] = [{str(ROOT / 'src')!r}, {str(FAULTS)!r}]
import numpy as np
import feedline
from feedline.errors import FeedlineError

def usage(shm=None):
    fds = len(os.listdir("/proc/self/fd"))
    tasks = len(os.listdir("/proc/self/task"))
    rss = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    kids = [p for p in os.listdir("/proc") if p.isdigit() and _ppid(p) == os.getpid()]
    arenas = [n for n in os.listdir(shm) if n.startswith("feedline-")] if shm else []
    return {{"fds": fds, "tasks": tasks, "rss": rss, "children": len(kids), "arenas": len(arenas)}}

def _ppid(pid):
    try:
        return int(open(f"/proc/{{pid}}/stat").read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1

def keys(loader):
    return [str(k) for b in loader for k in b["__key__"]]

def report(**kw):
    print("RESULT " + json.dumps(kw), flush=True)
"""

EPILOGUE = """
try:
    main()
except FeedlineError as e:
    print("CLEAR " + type(e).__name__ + ": " + " ".join(str(e).split())[:600], flush=True)
    sys.exit(3)
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1", **extra)
    return env


def child(h: ModuleType, body: str, *args: str, timeout: float = 120, limits: dict[int, int] | None = None,
          env: dict[str, str] | None = None, prefix: list[str] | None = None,
          cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``PRELUDE + body + EPILOGUE`` (``body`` defines ``main()``) in a child process."""

    def limit() -> None:
        for what, value in (limits or {}).items():
            resource.setrlimit(what, (value, value))
        # a sweep started as a background job (`nohup ... &`) ignores SIGINT, and so would
        # the child: Python then installs no KeyboardInterrupt handler, and every Ctrl-C of
        # the signals cases is lost (each of them ran into its 400 s limit)
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    import resource

    code = PRELUDE + body + EPILOGUE
    try:
        return subprocess.run([*(prefix or []), sys.executable, "-c", code, *args], env=env or _env(),
                              capture_output=True, text=True, timeout=timeout, preexec_fn=limit, cwd=cwd,
                              start_new_session=True)
    except subprocess.TimeoutExpired as e:
        raise h.Failure(f"hang: still running after {timeout} s; output {str(e.stdout)[-300:]!r}") from e


def verdict(h: ModuleType, res: subprocess.CompletedProcess[str], *names: str) -> tuple[str, Any]:
    """("ok", the RESULT dict) or ("error", the CLEAR line); anything else is a failure.
    ``names``: a clear error must name one of them (the limit, the setting to change)."""
    if "Traceback" in res.stderr:
        raise h.Failure(f"traceback (exit {res.returncode}): {res.stderr[-900:]}")
    if "Exception ignored" in res.stderr:
        raise h.Failure(f"an exception ignored: {res.stderr[-600:]}")
    clear = [ln for ln in res.stdout.splitlines() if ln.startswith("CLEAR ")]
    if res.returncode == 3 and clear:
        if names and not any(n in clear[0] for n in names):
            raise h.Failure(f"the error names none of {names}: {clear[0][:500]}")
        return "error", clear[0][6:]
    found = [ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")]
    if res.returncode != 0 or not found:
        raise h.Failure(f"exit {res.returncode}: {res.stdout[-300:]} {res.stderr[-600:]}")
    return "ok", json.loads(found[-1][7:])


# ----------------------------------------------------------------------------- datasets

_DATA: dict[str, tuple[Path, list[str]]] = {}


def dataset(h: ModuleType, n: int, shards: int | None = None, tag: str = "") -> tuple[Path, list[str]]:
    """A packed dataset of ``n`` samples of 200-700 bytes (about ``shards`` shards), made once
    a sweep and shared by the cases that only read it; returns the folder and its keys."""
    name = f"{n}-{shards}-{tag}"
    if name not in _DATA:
        root = Path(tempfile.mkdtemp(prefix="sweep12-"))
        import atexit

        atexit.register(shutil.rmtree, root, True)
        out = root / "ds"
        _pack_numbers(h, root / "src", out, n, shards, tag)
        _DATA[name] = (out, [f"s{i:05d}" for i in range(n)])
    return _DATA[name]


def _pack_numbers(h: ModuleType, src: Path, out: Path, n: int, shards: int | None, tag: str = "",
                  size: str | None = None) -> None:
    src.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (src / f"s{i:05d}.bin").write_bytes(f"{tag}{i:05d}".encode().ljust(200 + (i * 37) % 500, b"."))
    size = size or ("1KiB" if shards else "64MiB")  # 1 KiB: a sample a shard
    res = h.cli("pack", str(src), "--out", str(out), "-q", "--shard-size", size)
    if res.returncode != 0:
        raise h.Failure(f"could not pack the base dataset: {res.stderr[-400:]!r}")


# ----------------------------------------------------------------------------- limits

NOFILE_LOADER = """
def main():
    ds_dir, worker_type, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with feedline.Loader(ds_dir, batch_size=8, workers=workers, worker_type=worker_type, shuffle=True,
                         drop_last=False, shm_dir=sys.argv[4]) as loader:
        got = keys(loader)
    report(keys=got)
"""


def nofile_loader_case(h: ModuleType, limit: int, worker_type: str, n: int, shards: bool, workers: int) -> CaseFn:
    """A loader over ``n`` samples (one shard each when ``shards``) with ``ulimit -n limit``:
    the right epoch, or a clear error naming the limit and what to change."""

    def run(tmp: Path) -> str:
        ds, truth = dataset(h, n, n if shards else None)
        res = child(h, NOFILE_LOADER, str(ds), worker_type, str(workers), str(tmp),
                    limits={_rl("RLIMIT_NOFILE"): limit})
        kind, got = verdict(h, res, "ulimit -n", "RLIMIT_NOFILE", "open files")
        _no_arenas(h, tmp)
        if kind == "ok":
            if sorted(got["keys"]) != truth:
                raise h.Failure(f"an epoch of {len(got['keys'])} samples, not {len(truth)}")
            return f"the epoch, right ({len(truth)} samples)"
        return got

    return run


def nofile_pack_case(h: ModuleType, limit: int, files: int) -> CaseFn:
    def run(tmp: Path) -> str:
        src = tmp / "src"
        for d in range(files // 1000):
            (src / f"d{d}").mkdir(parents=True)
            for i in range(1000):
                (src / f"d{d}" / f"f{i:04d}.bin").write_bytes(b"%d-%d" % (d, i))
        res = _cli_limited(h, ("pack", str(src), "--out", str(tmp / "o"), "-q", "-j", "2"),
                           {_rl("RLIMIT_NOFILE"): limit})
        text = h.cli_clean(res, names=("ulimit -n", "RLIMIT_NOFILE", "open files"))
        if res.returncode == 0:
            got = h.payloads(tmp / "o")
            if len(got) != files:
                raise h.Failure(f"{len(got)} samples packed of {files}")
        return text

    return run


def _cli_limited(h: ModuleType, args: tuple[str, ...], limits: dict[int, int],
                 timeout: float = 300) -> subprocess.CompletedProcess[bytes]:
    def limit() -> None:
        import resource

        for what, value in limits.items():
            resource.setrlimit(what, (value, value))

    try:
        return subprocess.run([sys.executable, "-m", "feedline", *args], env=_env(COLUMNS="300"),
                              capture_output=True, timeout=timeout, preexec_fn=limit)
    except subprocess.TimeoutExpired as e:
        raise h.Failure(f"hang: {' '.join(args)} after {timeout} s") from e


def _rl(name: str) -> int:
    import resource

    return int(getattr(resource, name))


AS_LOADER = """
def main():
    import resource
    import torch  # imported before the limit: the limit is for the loader
    worker_type, rows, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    from faults_helpers import Numbers

    shared = np.zeros((rows,), np.float32)  # allocated before the limit

    class Big(Numbers):
        def __getitem__(self, i):
            if sys.argv[6] == "shared":  # nothing allocated per sample: the batch slots are
                return {"x": shared, "y": i}
            return {"x": np.full((rows,), i, np.float32), "y": i}

    cap = int(sys.argv[4])
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    with feedline.Loader(Big(24), batch_size=batch, workers=2, worker_type=worker_type, shuffle=False,
                         shm_dir=sys.argv[5], pinned_budget="64GiB") as loader:
        got = [int(v) for b in loader for v in b["y"].tolist()]
    report(keys=got)
"""


def as_case(h: ModuleType, worker_type: str, rows: int, batch: int, headroom: int, how: str = "own") -> CaseFn:
    """``RLIMIT_AS`` (a memory cap, as ``ulimit -v`` or a container's) ``headroom`` bytes
    above what the child has mapped once torch is imported, and batches of ``rows * batch``
    float32 values: the epoch, or a clear error saying what to lower."""

    def run(tmp: Path) -> str:
        base = _mapped_after_torch(h)
        res = child(h, AS_LOADER, worker_type, str(rows), str(batch), str(base + headroom), str(tmp), how)
        kind, got = verdict(h, res, "RLIMIT_AS", "out of memory")
        _no_arenas(h, tmp)
        if kind == "ok":
            want = list(range(24 // batch * batch))
            if got["keys"] != want:
                raise h.Failure(f"samples {got['keys'][:8]}..., not {want[:8]}...")
            return f"the epoch, right ({len(want)} samples)"
        return got

    return run


_MAPPED: list[int] = []


def _mapped_after_torch(h: ModuleType) -> int:
    if not _MAPPED:
        code = ("import torch, numpy, feedline, feedline.pipeline\n"
                "print(int(open('/proc/self/statm').read().split()[0]) * 4096)")
        res = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True,
                             timeout=120)
        if res.returncode != 0:
            raise h.Failure(f"cannot measure the address space: {res.stderr[-300:]}")
        _MAPPED.append(int(res.stdout.split()[-1]))
    return _MAPPED[0]


SHM_LOADER = """
def main():
    from faults_helpers import Numbers

    class Wide(Numbers):  # sample i: 64 KiB of float32 i
        def __getitem__(self, i):
            return {"x": np.full((16384,), i, np.float32), "y": i}

    with feedline.Loader(Wide(96), batch_size=int(sys.argv[2]), workers=2, worker_type="process",
                         shuffle=False, shm_dir=sys.argv[1], prefetch=4) as loader:
        got = [int(v) for b in loader for v in b["y"].tolist()]
    report(keys=got)
"""


def shm_case(h: ModuleType, size: str, batch: int) -> CaseFn:
    """Process workers whose ``shm_dir`` is a small tmpfs (a container's 64 MiB /dev/shm, here
    smaller): the epoch, or a ``ResourceError`` naming the folder and the fix; no arena left."""

    def run(tmp: Path) -> str:
        if os.geteuid() != 0:
            raise h.Skip("mounting a tmpfs needs root")
        mnt = tmp / "shm"
        mnt.mkdir()
        if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
                          capture_output=True).returncode != 0:
            raise h.Skip("cannot mount a tmpfs here")
        try:
            res = child(h, SHM_LOADER, str(mnt), str(batch))
            kind, got = verdict(h, res, "shm", "shared memory")
            _no_arenas(h, mnt)
        finally:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
        if kind == "ok":
            if got["keys"] != list(range(96 // batch * batch)):
                raise h.Failure(f"an epoch of {len(got['keys'])} samples")
            return f"the epoch, right ({len(got['keys'])} samples)"
        if "shm_dir" not in got and "/dev/shm" not in got:
            raise h.Failure(f"the error does not say which setting to change: {got}")
        return got

    return run


NPROC_LOADER = """
def main():
    from faults_helpers import Numbers
    with feedline.Loader(Numbers(64), batch_size=4, workers=int(sys.argv[2]), worker_type=sys.argv[1],
                         shuffle=False, shm_dir=sys.argv[3]) as loader:
        got = [int(v) for b in loader for v in b["y"].tolist()]
    report(keys=got)
"""


def nproc_case(h: ModuleType, limit: int, worker_type: str, workers: int) -> CaseFn:
    """``ulimit -u`` (RLIMIT_NPROC: processes and threads of the user) too low for the
    workers asked: the epoch, or a clear error naming the limit and ``workers``."""

    def run(tmp: Path) -> str:
        if not h.can_drop_caps():
            raise h.Skip("RLIMIT_NPROC binds only a user other than root: needs root and setpriv")
        os.chmod(tmp, 0o777)
        prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                  "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]
        if subprocess.run(["ps", "-u", "65534", "-o", "pid="], capture_output=True, text=True).stdout.strip():
            raise h.Skip("processes of nobody already run here (they count against the limit)")
        res = child(h, NPROC_LOADER, worker_type, str(workers), str(tmp), prefix=prefix, cwd=tmp,
                    limits={_rl("RLIMIT_NPROC"): limit})
        kind, got = verdict(h, res, "ulimit -u", "RLIMIT_NPROC")
        _no_arenas(h, tmp)
        if kind == "ok":
            if got["keys"] != list(range(64)):
                raise h.Failure(f"samples {got['keys'][:8]}...")
            return "the epoch, right"
        if "workers" not in got:
            raise h.Failure(f"the error does not say to lower workers: {got}")
        return got

    return run


def _no_arenas(h: ModuleType, shm: Path) -> None:
    left = [n for n in os.listdir(shm) if n.startswith("feedline-")]
    if left:
        raise h.Failure(f"arenas left in {shm}: {left}")


# ----------------------------------------------------------------------------- leaks

EPOCHS = """
def main():
    ds_dir, worker_type, epochs, shm = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    seen = []
    with feedline.Loader(ds_dir, batch_size=8, workers=2, worker_type=worker_type, shm_dir=shm) as loader:
        for epoch in range(epochs):
            loader.set_epoch(epoch)
            got = keys(loader)
            seen.append(len(set(got)) == len(got) == len(loader) * 8)
            gc.collect()
            if epoch == 4:
                early = usage(shm)
        late = usage(shm)
    gc.collect()
    report(early=early, late=late, right=all(seen), after=usage(shm))
"""

DROPPED = """
def main():
    ds_dir, worker_type, mode, shm = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    ds = feedline.open_dataset(ds_dir)
    def once():
        loader = feedline.Loader(ds, batch_size=8, workers=2, worker_type=worker_type, shm_dir=shm)
        if mode == "dropped":  # mid-epoch, without close()
            it = iter(loader)
            next(it); next(it)
            return
        if mode == "abandoned":  # iterators left behind, then the rest of the epoch
            first = []
            for _ in range(5):
                it = iter(loader)
                first += [str(k) for k in next(it)["__key__"]]
            got = first + keys(loader)  # a new iter() goes on where the last delivered batch ended
            assert len(set(got)) == len(got) == len(loader) * 8, (len(set(got)), len(got))
            loader.close()
    once(); gc.collect()
    time.sleep(0.5)
    early = usage(shm)
    for _ in range(20):
        once()
    gc.collect()
    time.sleep(0.5)
    report(early=early, late=usage(shm))
"""


def leak_case(h: ModuleType, script: str, worker_type: str, *args: str) -> CaseFn:
    """Fds, threads, child processes and arenas the same after many epochs (or dropped
    loaders, or abandoned iterators) as after a few; RSS within 64 MiB."""

    def run(tmp: Path) -> str:
        ds, _ = dataset(h, 400)
        res = child(h, script, str(ds), worker_type, *args, str(tmp), timeout=300)
        kind, got = verdict(h, res)
        if kind == "error":
            raise h.Failure(f"an error where none is due: {got}")
        early, late = got["early"], got["late"]
        if not got.get("right", True):
            raise h.Failure("an epoch gave samples twice or lost some")
        grew = {k: (early[k], late[k]) for k in ("fds", "tasks", "children", "arenas") if late[k] > early[k]}
        if late["rss"] - early["rss"] > 64 << 20:
            grew["rss MiB"] = (early["rss"] >> 20, late["rss"] >> 20)
        if grew or (got.get("after") and (got["after"]["children"] or got["after"]["arenas"])):
            raise h.Failure(f"grew: {grew}; after close: {got.get('after')}")
        return (f"flat: fds {late['fds']}, tasks {late['tasks']}, children {late['children']}, "
                f"rss {early['rss'] >> 20}->{late['rss'] >> 20} MiB")

    return run


TWO_ITERATORS = """
def main():
    from faults_helpers import Numbers
    with feedline.Loader(Numbers(64), batch_size=4, workers=2, worker_type=sys.argv[1], shuffle=False,
                         shm_dir=sys.argv[2]) as loader:
        a = iter(loader)
        first = next(a)["y"].tolist()
        b = iter(loader)
        got_b = [v for batch in b for v in batch["y"].tolist()]
        try:
            rest_a = [v for batch in a for v in batch["y"].tolist()]
        except FeedlineError as e:
            rest_a = "CLEAR " + type(e).__name__ + ": " + str(e)[:200]
    report(first=first, b=got_b, a=rest_a)
"""


def two_iterators_case(h: ModuleType, worker_type: str) -> CaseFn:
    """Two iterators of one loader at once: a loader is one stream, so the new one goes on
    with the rest of the epoch (docs/loading.md); the old one is either refused with a clear
    error or gives nothing more (never a batch twice)."""

    def run(tmp: Path) -> str:
        res = child(h, TWO_ITERATORS, worker_type, str(tmp))
        kind, got = verdict(h, res)
        if kind == "error":
            raise h.Failure(f"an error at the second iter(): {got}")
        if got["first"] != [0, 1, 2, 3] or got["b"] != list(range(4, 64)):
            raise h.Failure(f"the second iterator gave {got['b'][:8]}...")
        if isinstance(got["a"], list) and got["a"]:
            raise h.Failure(f"the first iterator went on after the second began: {got['a'][:8]}")
        return f"second whole; first: {str(got['a'])[:120] or 'ended'}"

    return run


FORK = """
def main():
    from faults_helpers import Numbers
    worker_type, when, shm = sys.argv[1], sys.argv[2], sys.argv[3]
    loader = feedline.Loader(Numbers(64), batch_size=4, workers=2, worker_type=worker_type, shuffle=False,
                             shm_dir=shm)
    it = None
    if when == "iterating":
        it = iter(loader)
        next(it)
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            got = [v for b in (it if it is not None else loader) for v in b["y"].tolist()]
            code = 0 if got == (list(range(4, 64)) if it is not None else list(range(64))) else 4
        except FeedlineError as e:
            print("CHILD CLEAR " + type(e).__name__ + ": " + " ".join(str(e).split())[:300], flush=True)
            code = 5
        except BaseException as e:
            print("CHILD RAW " + type(e).__name__ + ": " + str(e)[:300], flush=True)
            code = 6
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    child = os.waitstatus_to_exitcode(status)
    rest = [v for b in (it if it is not None else loader) for v in b["y"].tolist()]
    loader.close()
    report(child=child, parent=rest == (list(range(4, 64)) if it is not None else list(range(64))), after=usage(shm))
"""


def fork_case(h: ModuleType, worker_type: str, when: str) -> CaseFn:
    """``os.fork()`` of a process holding a Loader (made, or iterating): the child gets
    the right samples or a clear error, never a hang; the parent goes on, right."""

    def run(tmp: Path) -> str:
        res = child(h, FORK, worker_type, when, str(tmp), timeout=90)
        kind, got = verdict(h, res)
        if kind == "error":
            raise h.Failure(f"the parent failed: {got}")
        if not got["parent"]:
            raise h.Failure("the parent's samples after the fork were wrong")
        if got["child"] in (4, 6) or "CHILD RAW" in res.stdout:
            raise h.Failure(f"the child: exit {got['child']}: {res.stdout[-400:]}")
        if got["after"]["children"] or got["after"]["arenas"]:
            raise h.Failure(f"left after close: {got['after']}")
        said = [ln for ln in res.stdout.splitlines() if ln.startswith("CHILD CLEAR")]
        return "child: right samples" if got["child"] == 0 else f"child: {said[0][6:160] if said else got['child']}"

    return run


DATALOADER = """
def main():
    import torch
    from torch.utils.data import DataLoader, IterableDataset
    ds_dir, how, shm = sys.argv[1], sys.argv[2], sys.argv[3]
    ds = feedline.open_dataset(ds_dir)
    if how == "map":  # the packed dataset itself, read by DataLoader's forked workers
        dl = DataLoader(ds, batch_size=8, num_workers=2, collate_fn=lambda s: [x["__key__"] for x in s])
        got = [k for b in dl for k in b]
    else:  # a feedline Loader made in the parent, iterated inside each DataLoader worker
        inner = feedline.Loader(ds, batch_size=8, workers=1, shuffle=False, worker_type=how, shm_dir=shm)

        class Wrapped(IterableDataset):
            def __iter__(self):
                for b in inner:
                    yield from b["__key__"]

        dl = DataLoader(Wrapped(), batch_size=None, num_workers=2)
        got = [str(k) for k in dl]
        inner.close()
    report(keys=[str(k) for k in got], after=usage(shm))
"""


def dataloader_case(h: ModuleType, how: str) -> CaseFn:
    """A torch ``DataLoader`` with forked workers over a packed dataset, or over a feedline
    Loader made before the fork: the right samples (each worker a whole epoch, as
    DataLoader does with an IterableDataset) or a clear error; no hang, nothing left."""

    def run(tmp: Path) -> str:
        ds, truth = dataset(h, 400)
        res = child(h, DATALOADER, str(ds), how, str(tmp), timeout=180)
        kind, got = verdict(h, res)
        if kind == "error":
            return got
        want = sorted(truth) if how == "map" else sorted(truth * 2)
        if sorted(got["keys"]) != want:
            raise h.Failure(f"{len(got['keys'])} samples, not {len(want)}")
        if got["after"]["arenas"]:
            raise h.Failure(f"arenas left: {got['after']}")
        return f"right: {len(got['keys'])} samples"

    return run


# ----------------------------------------------------------------------------- concurrent

READ_THROUGH = """
def main():
    ds_dir, worker_type, shm, flag = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    ds = feedline.open_dataset(ds_dir)
    out = []
    with feedline.Loader(ds, batch_size=8, workers=2, worker_type=worker_type, shuffle=True, shm_dir=shm,
                         drop_last=False) as loader:
        try:
            for i, b in enumerate(loader):
                out += [(str(k), bytes(np.asarray(v)).decode()) for k, v in zip(b["__key__"], b["bin"])]
                if i == 3:
                    open(flag, "w").close()
                    while os.path.exists(flag):  # the other process rewrites the folder now
                        time.sleep(0.05)
        except FeedlineError as e:
            report(pairs=out, error=type(e).__name__ + ": " + " ".join(str(e).split())[:300])
            return
    report(pairs=out, error=None)
"""


def rewrite_while_reading_case(h: ModuleType, worker_type: str, how: str) -> CaseFn:
    """``feedline pack`` of other content (or ``feedline index`` of the same tars) into the
    folder a Loader reads, after its 4th batch: every sample delivered is the old dataset's
    bytes (its snapshot) or the pass ends in an error naming a shard; never mixed data."""

    def run(tmp: Path) -> str:
        _pack_numbers(h, tmp / "a", tmp / "ds", 300, None, "A", "16KiB")  # about 12 shards

        def change() -> None:
            if how == "pack":
                src = tmp / "b"
                src.mkdir()
                for i in range(300):
                    (src / f"s{i:05d}.bin").write_bytes(f"B{i:05d}".encode().ljust(200 + (i * 37) % 500, b"."))
                res = h.cli("pack", str(src), "--out", str(tmp / "ds"), "-q", "--shard-size", "16KiB")
            else:
                res = h.cli("index", *sorted(str(p) for p in (tmp / "ds").glob("*.tar")), "--out", str(tmp / "ds"))
            h.cli_clean(res, codes=(0,))
            if how == "pack" and not all(p.startswith(b"B") for p in h.payloads(tmp / "ds")):
                raise h.Failure("the second pack did not replace the dataset")

        return read_while_changed(h, READ_THROUGH, [str(tmp / "ds"), worker_type, str(tmp)], tmp / "go", change)

    return run


def read_while_changed(h: ModuleType, body: str, args: list[str], flag: Path, change: Callable[[], None]) -> str:
    """Run ``body`` (a ``READ_THROUGH``-like reader of the 300-sample "A" dataset, given
    ``args`` and ``flag``), call ``change()`` once it has made ``flag`` (after its 4th batch),
    then judge what it read: every sample its own old bytes, delivered once, and the whole
    epoch or an error naming a shard."""
    proc = subprocess.Popen([sys.executable, "-c", PRELUDE + body + EPILOGUE, *args[:3], str(flag), *args[3:]],
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        t0 = time.monotonic()
        while not flag.exists() and proc.poll() is None and time.monotonic() - t0 < 120:
            time.sleep(0.02)
        change()
        flag.unlink(missing_ok=True)
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise h.Failure("hang: the reader never finished") from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    kind, got = verdict(h, subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    if kind == "error":
        raise h.Failure(f"the reader failed outside its epoch: {got}")
    pairs = got["pairs"]
    wrong = [(k, v[:6]) for k, v in pairs if not v.startswith("A" + k[1:])]
    if wrong:
        raise h.Failure(f"{len(wrong)} samples not the old dataset's bytes: {wrong[:3]}")
    if len({k for k, _ in pairs}) != len(pairs):
        raise h.Failure("a sample delivered twice")
    if got["error"]:
        if "shard" not in got["error"]:
            raise h.Failure(f"the error names no shard: {got['error']}")
        return f"{len(pairs)} old samples, then {got['error'][:140]}"
    if len(pairs) != 300:
        raise h.Failure(f"{len(pairs)} samples, not 300, and no error")
    return "the old dataset's epoch, whole"


def two_packs_case(h: ModuleType, seed: int) -> CaseFn:
    """Two ``feedline pack`` of different sources into one --out at once: one of them wins
    whole (verify passes, its bytes), the other exits 1 naming the other writer."""

    def run(tmp: Path) -> str:
        rng = random.Random(seed)
        truths = []
        for tag in "AB":
            src = tmp / tag
            src.mkdir()
            for i in range(rng.randint(50, 400)):
                (src / f"s{i:04d}.bin").write_bytes((tag * (1 + rng.randint(0, 3000))).encode())
            truths.append(sorted(p.read_bytes() for p in src.iterdir()))
        env = _env(COLUMNS="300")
        procs = [subprocess.Popen([sys.executable, "-m", "feedline", "pack", str(tmp / t), "--out", str(tmp / "o"),
                                   "-q", "--shard-size", rng.choice(["8KiB", "64KiB", "1MiB"])],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for t in "AB"]
        results = []
        for p in procs:
            out, err = p.communicate(timeout=180)
            results.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
        for r in results:
            h.cli_clean(r, codes=(0, 1), names=("another feedline pack",))
        if not any(r.returncode == 0 for r in results):
            raise h.Failure("neither pack finished")
        got = sorted(h.payloads(tmp / "o"))
        if got not in truths:
            raise h.Failure("the dataset is neither source's")
        v = h.cli("verify", str(tmp / "o"))
        h.cli_clean(v, codes=(0,))
        return f"exits {[r.returncode for r in results]}, source {'AB'[truths.index(got)]} whole"

    return run


# ----------------------------------------------------------------------------- distributed

ARGS = """
def main():
    from faults_helpers import Numbers
    kw = json.loads(sys.argv[1])
    kw = {k: (True if v == "True" else v) for k, v in kw.items()}
    loader = feedline.Loader(Numbers(10), batch_size=2, workers=1, shuffle=False, drop_last=kw.pop("drop_last", True), **kw)
    got = [v for b in loader for v in b["y"].tolist()]
    report(keys=got, rank=loader.rank, world=loader.world_size)
"""


def rank_arg_case(h: ModuleType, kw: dict[str, Any], env: dict[str, str] | None = None) -> CaseFn:
    """Hostile ``rank``/``world_size`` (or RANK/WORLD_SIZE/LOCAL_RANK in the environment,
    which the Loader does not read: ranks are arguments): a clear error naming the argument,
    or the documented share."""

    def run(tmp: Path) -> str:
        res = child(h, ARGS, json.dumps(kw), env=_env(**(env or {})))
        named = [k for k in kw if k in ("rank", "world_size")]
        kind, got = verdict(h, res, *(named or ["rank", "world_size"]))
        if kind == "error":
            if not named:
                raise h.Failure(f"an error from the environment alone: {got}")
            return got
        if env and (got["rank"], got["world"]) != (kw.get("rank", 0), kw.get("world_size", 1)):
            raise h.Failure(f"rank {got['rank']} of {got['world']} from the environment {env}")
        several = (env or {}).get("WORLD_SIZE", "").isdigit() and int(env["WORLD_SIZE"]) > 1
        if several and "UnshardedWarning" not in res.stderr:
            raise h.Failure(f"every rank of WORLD_SIZE={env['WORLD_SIZE']} reads the whole dataset, unsaid")
        world, rank = got["world"], got["rank"]
        share = list(range(10))[rank::world] if not kw.get("drop_last", True) else None
        if share is not None and got["keys"][: len(share)] != share:
            raise h.Failure(f"rank {rank} of {world} read {got['keys']}, not {share}")
        return f"accepted: rank {rank} of {world}: {got['keys']}"

    return run


RANK = """
def main():
    ds_dir, rank, world, drop, epochs, worker_type, shm = sys.argv[1:8]
    with feedline.Loader(ds_dir, batch_size=4, workers=2, worker_type=worker_type, rank=int(rank),
                         world_size=int(world), drop_last=drop == "1", shm_dir=shm, seed=7) as loader:
        per = []
        for e in range(int(epochs)):
            loader.set_epoch(e)
            per.append(keys(loader))
        report(epochs=per, batches=len(loader))
"""

GLOO = """
def main():
    import torch.distributed as dist
    ds_dir, rank, world, drop, epochs, worker_type, shm, init = sys.argv[1:9]
    dist.init_process_group("gloo", init_method=init, rank=int(rank), world_size=int(world))
    try:
        with feedline.Loader(ds_dir, batch_size=4, workers=2, worker_type=worker_type, process_group=dist.group.WORLD,
                             drop_last=drop == "1", shm_dir=shm, seed=7) as loader:
            per = []
            for e in range(int(epochs)):
                loader.set_epoch(e)
                per.append(keys(loader))
            report(epochs=per, batches=len(loader))
    finally:
        dist.destroy_process_group()
"""


def ranks_case(h: ModuleType, n: int, world: int, drop_last: bool, worker_type: str, gloo: bool,
               shards: bool) -> CaseFn:
    """``world`` real processes, one a rank, 2 epochs: drop_last=True, disjoint parts of
    equal length covering ``n - n % (world * batch)`` samples; drop_last=False, every sample
    at least once and at most ``(-n) % world`` samples (the documented wrap-around) twice,
    every rank the same number of batches."""

    def run(tmp: Path) -> str:
        ds, truth = dataset(h, n, n if shards else None)
        init = f"file://{tmp}/rendezvous"
        procs = []
        for r in range(world):
            args = [str(ds), str(r), str(world), "1" if drop_last else "0", "2", worker_type, str(tmp)]
            script = GLOO if gloo else RANK
            procs.append(subprocess.Popen([sys.executable, "-c", PRELUDE + script + EPILOGUE, *args,
                                           *([init] if gloo else [])], env=_env(), stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True, start_new_session=True))
        results = []
        try:
            for p in procs:
                out, err = p.communicate(timeout=240)
                results.append(verdict(h, subprocess.CompletedProcess(p.args, p.returncode, out, err)))
        except subprocess.TimeoutExpired:
            for p in procs:
                with __import__("contextlib").suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
            raise h.Failure("hang: a rank never finished") from None
        errors = [g for k, g in results if k == "error"]
        if errors:
            if drop_last and n < world * 4 and "rank(s) one full batch" in errors[0] and "drop_last" in errors[0]:
                return errors[0]  # no full batch for every rank: refused, naming the fix
            raise h.Failure(f"rank errors: {errors[:2]}")
        batches = {g["batches"] for _, g in results}
        if len(batches) != 1:
            raise h.Failure(f"ranks of different lengths: {batches}")
        for e in range(2):
            parts = [g["epochs"][e] for _, g in results]
            if len({len(p) for p in parts}) != 1:
                raise h.Failure(f"epoch {e}: ranks read {[len(p) for p in parts]} samples")
            seen = [k for p in parts for k in p]
            if drop_last:
                want = n - n % (world * 4)
                if len(seen) != want or len(set(seen)) != want:
                    raise h.Failure(f"epoch {e}: {len(set(seen))} distinct of {len(seen)}, want {want} once each")
            else:
                twice = len(seen) - len(set(seen))
                if set(seen) != set(truth) or twice > max((-n) % world, world - n if n < world else 0):
                    raise h.Failure(f"epoch {e}: {len(set(seen))} of {n} seen, {twice} twice")
        return f"{world} ranks x {batches.pop()} batches, every sample as promised"

    return run


# ----------------------------------------------------------------------------- signals

SIGINT_RETURN = """
def main():
    import random, signal
    import torch
    from faults_helpers import Numbers
    n, seed, shm = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    rng = random.Random(seed)
    ignored = []
    sys.unraisablehook = lambda u: ignored.append(type(u.exc_value).__name__)
    ack, go, done = threading.Event(), threading.Event(), threading.Event()
    lost = [0]

    def sender():
        go.wait()
        for _ in range(n):
            ack.clear()
            time.sleep(rng.uniform(0, 0.002))
            os.kill(os.getpid(), signal.SIGINT)
            if not ack.wait(5):
                lost[0] += 1
        done.set()

    got = 0
    loader = feedline.Loader(Numbers(4000), batch_size=4, workers=2, shuffle=False, shm_dir=shm)
    threading.Thread(target=sender, daemon=True).start()
    answer = False
    while True:
        try:  # the next signal is sent only once this is acknowledged, inside the try
            if answer:
                answer = False
                ack.set()
            go.set()
            while not done.is_set():
                for batch in loader:
                    if done.is_set():
                        break
            break
        except KeyboardInterrupt:
            got += 1
            answer = True
    loader.close()
    report(sent=n, got=got, lost=lost[0], ignored=ignored)
"""


def sigint_case(h: ModuleType, seed: int, n: int) -> CaseFn:
    """``n`` Ctrl-Cs at random moments into a loop over a CPU loader (each batch's slot
    comes back as the loop drops it): every one reaches the loop as KeyboardInterrupt,
    none is "Exception ignored"."""

    def run(tmp: Path) -> str:
        return sigint_run(h, SIGINT_RETURN, n, seed, tmp)

    return run


def sigint_run(h: ModuleType, body: str, n: int, seed: int, tmp: Path) -> str:
    """Run a ``SIGINT_RETURN``-like ``body``: every one of ``n`` Ctrl-Cs reached the loop."""
    res = child(h, body, str(n), str(seed), str(tmp), timeout=400)
    kind, got = verdict(h, res)
    if kind == "error":
        raise h.Failure(f"an error: {got}")
    if got["lost"] or got["ignored"]:
        raise h.Failure(f"{got['lost']} of {n} interrupts lost, ignored: {got['ignored'][:3]}")
    return f"{got['got']} of {n} interrupts reached the loop"


# ----------------------------------------------------------------------------- cases


def cases(h: ModuleType) -> list[tuple[str, str, CaseFn]]:
    out: list[tuple[str, str, CaseFn]] = []
    for limit in (64, 128):
        out.append(("limits", f"nofile-{limit}-pack-10k-files", nofile_pack_case(h, limit, 10_000)))
        for wt in ("thread", "process"):
            out.append(("limits", f"nofile-{limit}-loader-500-shards-{wt}", nofile_loader_case(h, limit, wt, 500, True, 2)))
    out.append(("limits", "nofile-64-8-process-workers", nofile_loader_case(h, 64, "process", 400, False, 8)))
    out.append(("limits", "nofile-32-4-process-workers", nofile_loader_case(h, 32, "process", 400, False, 4)))
    out.append(("limits", "nofile-24-thread", nofile_loader_case(h, 24, "thread", 400, False, 2)))
    for wt in ("thread", "process"):
        out.append(("limits", f"as-tight-{wt}", as_case(h, wt, 1 << 22, 8, 96 << 20)))  # 128 MiB batches
        out.append(("limits", f"as-roomy-{wt}", as_case(h, wt, 1 << 16, 4, 1 << 30)))
        out.append(("limits", f"as-slots-{wt}", as_case(h, wt, 1 << 22, 8, 96 << 20, "shared")))
    for size, batch in (("64k", 1), ("1m", 8), ("8m", 8), ("64m", 8), ("8m", 32)):
        out.append(("limits", f"shm-tmpfs-{size}-batch{batch}", shm_case(h, size, batch)))
    for limit, wt, workers in ((8, "process", 4), (3, "process", 4), (30, "process", 8), (12, "thread", 8),
                              (4, "thread", 8), (64, "process", 2)):
        out.append(("limits", f"nproc-{limit}-{wt}-{workers}", nproc_case(h, limit, wt, workers)))
    for wt in ("thread", "process"):
        out.append(("leaks", f"50-epochs-{wt}", leak_case(h, EPOCHS, wt, "50")))
        out.append(("leaks", f"dropped-mid-epoch-x20-{wt}", leak_case(h, DROPPED, wt, "dropped")))
        out.append(("leaks", f"abandoned-iterators-x20-{wt}", leak_case(h, DROPPED, wt, "abandoned")))
        out.append(("leaks", f"two-iterators-{wt}", two_iterators_case(h, wt)))
        for when in ("made", "iterating"):
            out.append(("leaks", f"fork-{when}-{wt}", fork_case(h, wt, when)))
    for how in ("map", "thread", "process"):
        out.append(("leaks", f"dataloader-workers-{how}", dataloader_case(h, how)))
    for wt in ("thread", "process"):
        for how in ("pack", "index"):
            out.append(("concurrent", f"{how}-while-reading-{wt}", rewrite_while_reading_case(h, wt, how)))
    for seed in range(3):
        out.append(("concurrent", f"two-packs-one-out-{seed}", two_packs_case(h, 1200 + seed)))
    for kw in ({"rank": -1, "world_size": 2}, {"rank": 2, "world_size": 2}, {"rank": 9, "world_size": 2},
               {"rank": 0, "world_size": 0}, {"world_size": -3}, {"rank": 1}, {"rank": "True", "world_size": 2},
               {"rank": "1", "world_size": 2}, {"rank": 1.0, "world_size": 2}, {"rank": 0, "world_size": 2**70},
               {"rank": 0, "world_size": 11, "drop_last": False}, {"rank": 3, "world_size": 11},
               {"rank": 1, "world_size": 3, "drop_last": False}, {"world_size": 2}):
        out.append(("distributed", "args-" + ",".join(f"{k}={v}" for k, v in kw.items()), rank_arg_case(h, kw)))
    for env in ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}, {"RANK": "-1", "WORLD_SIZE": "0"},
                {"RANK": "abc", "WORLD_SIZE": "1e9", "LOCAL_RANK": ""}, {"WORLD_SIZE": "2"}):
        out.append(("distributed", "env-" + ",".join(f"{k}={v}" for k, v in env.items()), rank_arg_case(h, {}, env)))
    for n, world, drop, wt, gloo, shards in ((101, 2, False, "thread", False, False), (101, 3, True, "thread", False, False),
                                             (37, 4, False, "process", False, True), (37, 7, True, "thread", False, True),
                                             (5, 8, False, "thread", False, False), (5, 8, True, "thread", False, False),
                                             (50, 3, False, "thread", True, True), (64, 4, True, "process", True, False)):
        name = f"ranks-n{n}-world{world}-{'drop' if drop else 'pad'}-{wt}{'-gloo' if gloo else ''}{'-shards' if shards else ''}"
        out.append(("distributed", name, ranks_case(h, n, world, drop, wt, gloo, shards)))
    for seed in range(3):
        out.append(("signals", f"sigint-as-batches-die-{seed}", sigint_case(h, 1250 + seed, 400)))
    return out
