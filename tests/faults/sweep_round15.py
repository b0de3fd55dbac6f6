"""Round 15 of the seeded sweep (issue 13): kinds of hostile input the earlier rounds lack.
``hostile_sweep.py`` adds these cases to its own (groups ``odd-files``, ``user-code``,
``stop-cont``, ``death``, ``preempt``, ``foreign-state15``, ``cli-paths``); each ends as
the others do: a clear error naming the thing, or a right result, and nothing left behind.

* ``odd-files``: a shard replaced by a folder, by a hard link to another shard; the
  manifest or an index a FIFO; an index a link to ``/dev/zero``; the dataset path a file;
  ``verify``/``inspect`` over them.
* ``user-code``: a decode that returns a generator; a transform that raises ``SystemExit``
  or ``KeyboardInterrupt`` in a worker; an exception whose ``str()`` raises, or that cannot
  be pickled; a map-style dataset whose ``__len__`` lies or is absurd.
* ``stop-cont``: a process worker stopped (SIGSTOP) for 2 s, or for good under
  ``timeout=``; the forkserver stopped and continued before a loader starts.
* ``death``: the training process ended mid-epoch by a signal it does not handle (SIGHUP,
  SIGUSR1, SIGALRM, SIGXCPU), or sent SIGPIPE (which Python ignores).
* ``preempt``: a SIGTERM handler that saves the loader's state and a model through a
  ``Checkpointer`` and exits; a new process resumes the rest of the epoch exactly; the whole
  process stopped (SIGSTOP) for 2 s in the middle of a save.
* ``foreign-state15``: a packed dataset's state loaded into a map-style loader; a state
  loaded while an iterator is live; a state taken after the epoch ended.
* ``cli-paths``: ``--out`` a link into SRC, ``SRC/../SRC``, one SRC given twice.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import sweep_round12 as r12

CaseFn = Callable[[Path], str]


# ----------------------------------------------------------------------------- odd files

def _odd(tmp: Path, ds: Path, how: str) -> Path:
    """Make ``ds`` odd in the way ``how`` says; returns the path an error should name."""
    shards = sorted(ds.glob("*.tar"))
    if how == "shard-is-folder":
        shards[1].unlink()
        shards[1].mkdir()
        return shards[1]
    if how == "shard-hardlink-to-another":
        shards[1].unlink()
        os.link(shards[0], shards[1])
        return shards[1]
    if how == "manifest-fifo":
        (ds / "manifest.json").unlink()
        os.mkfifo(ds / "manifest.json")
        return ds / "manifest.json"
    if how == "index-fifo":
        idx = sorted(ds.glob("*.idx"))[0]
        idx.unlink()
        os.mkfifo(idx)
        return idx
    if how == "index-dev-zero":
        idx = sorted(ds.glob("*.idx"))[0]
        idx.unlink()
        idx.symlink_to("/dev/zero")
        return idx
    if how == "dataset-is-a-file":
        shutil.rmtree(ds)
        ds.write_bytes(b"not a dataset")
        return ds
    raise ValueError(how)


def odd_file_case(h: ModuleType, how: str, via: str) -> CaseFn:
    """A dataset with one odd file, opened and read (``via="api"``, ``verify=True``) or given
    to ``feedline verify``/``inspect``: a clear error naming it, within seconds; never a
    blocked open, never another shard's bytes."""

    def run(tmp: Path) -> str:
        ds, truth = h.small_dataset(tmp, n=24, size=400)
        bad = _odd(tmp, ds, how)
        names = (bad.name, "shard-", "manifest")
        if via == "api":
            def read() -> dict[str, bytes]:
                got = feedline_read(ds)
                return got

            with h.deadline(30):
                kind, value = h.expect_clear(read, *names)
            if kind == "ok":
                if value != truth:
                    raise h.Failure(f"read {len(value)} samples, some not the sources' bytes")
                raise h.Failure("an odd dataset opened and read as if whole")
            return value
        res = h.cli(via, str(ds), timeout=30)
        if res.returncode == 0:
            raise h.Failure(f"`feedline {via}` exit 0 over a dataset with {how}")
        return h.cli_clean(res, codes=(1, 2), names=names)

    return run


def feedline_read(ds: Path) -> dict[str, bytes]:
    import feedline

    d = feedline.open_dataset(ds, verify=True)
    out = {}
    for i in range(len(d)):
        s = d[i]
        out[str(s["__key__"])] = bytes(s["bin"])
    return out


# ----------------------------------------------------------------------------- user code

USER_CODE = """
import signal
class Rows:
    def __init__(self, n, fail_at=None, how=None, lie=None):
        self.n, self.fail_at, self.how, self.lie = n, fail_at, how, lie
    def __len__(self):
        return self.lie if self.lie is not None else self.n
    def __getitem__(self, i):
        if i >= self.n:
            raise IndexError(i)
        return {"y": i, "v": np.full(3, i, np.int64)}

class BadStr(Exception):
    def __str__(self):
        raise RuntimeError("str() of this exception raises")

class NoPickle(Exception):
    def __init__(self, a, b):
        super().__init__(f"{a}/{b}")

def hostile(sample, how, at):
    if int(sample["y"]) != at:
        return sample
    if how == "generator":
        return {**sample, "v": (x for x in range(3))}
    if how == "systemexit":
        raise SystemExit(0)
    if how == "keyboardinterrupt":
        raise KeyboardInterrupt
    if how == "badstr":
        raise BadStr()
    if how == "nopickle":
        raise NoPickle(1, 2)
    raise ValueError(how)

def main():
    import functools
    wt, how = sys.argv[1], sys.argv[2]
    n = 40
    if how.startswith("len-"):
        lie = {"len-long": 48, "len-negative": -3, "len-float": 40.5, "len-huge": 2**62}[how]
        try:
            with feedline.Loader(Rows(n, lie=lie), batch_size=4, workers=2, worker_type=wt, shuffle=False,
                                 drop_last=False, timeout=60) as loader:
                got = [int(v) for b in loader for v in b["y"].tolist()]
        except FeedlineError:
            raise
        report(got=got)
        return
    transform = functools.partial(hostile, how=how, at=13)
    got, raised = [], None
    try:
        with feedline.Loader(Rows(n), batch_size=4, workers=2, worker_type=wt, shuffle=False, drop_last=False,
                             transform=transform, timeout=60) as loader:
            for b in loader:
                got += [int(v) for v in b["y"].tolist()]
    except FeedlineError:
        raise
    except BaseException as e:  # SystemExit / KeyboardInterrupt reaching the loop: the user's own
        raised = type(e).__name__
    report(got=got, raised=raised, after=usage())
"""


def user_code_case(h: ModuleType, worker_type: str, how: str) -> CaseFn:
    """A dataset, decode or transform that does something hostile in a worker. Allowed: a
    clear error naming the sample, or the user's own ``SystemExit``/``KeyboardInterrupt``
    reaching the loop, or (a lying ``__len__``) an epoch of the samples that exist, each
    once. Never a silently short epoch, a hang, a traceback from a worker."""

    def run(tmp: Path) -> str:
        res = r12.child(h, USER_CODE, worker_type, how, timeout=120)
        kind, value = r12.verdict(h, res, "13", "key", "sample", "__len__", "len", "IndexError")
        if kind == "error":
            return value
        got = value["got"]
        if how.startswith("len-"):
            if sorted(got) != list(range(40)):
                raise h.Failure(f"a dataset whose __len__ says {how}: {len(got)} samples delivered, "
                                f"not the 40 that exist once each")
            return f"ok: 40 samples ({how})"
        if how in ("systemexit", "keyboardinterrupt") and value["raised"] in ("SystemExit", "KeyboardInterrupt"):
            if value["after"]["children"]:
                raise h.Failure(f"{value['raised']} reached the loop but left {value['after']['children']} "
                                "child processes")
            return f"{value['raised']} reached the loop after {len(got)} samples"
        if sorted(got) != list(range(40)) or value["raised"]:
            raise h.Failure(f"{how}: {len(got)} of 40 samples and no error (raised={value['raised']})")
        # thread workers hand any object over as it is (a list for the batch), a generator too;
        # process workers must pickle it, and say which key and field cannot be
        return f"ok: {len(got)} samples"

    return run


# ----------------------------------------------------------------------------- stop / cont

STOP_CONT = """
def main():
    from faults_helpers import Numbers
    how, shm = sys.argv[1], sys.argv[2]
    timeout = 3 if how == "forever" else 60
    loader = feedline.Loader(Numbers(64), batch_size=4, workers=2, worker_type="process", shuffle=False,
                             drop_last=False, timeout=timeout, shm_dir=shm,
                             start_method="forkserver" if how == "forkserver" else "fork")
    got, err = [], None
    if how == "forkserver":
        from multiprocessing import forkserver
        import multiprocessing as mp
        mp.get_context("forkserver")
        forkserver.ensure_running()
        fs = forkserver._forkserver._forkserver_pid
        os.kill(fs, signal.SIGSTOP)
        threading.Timer(2.0, os.kill, (fs, signal.SIGCONT)).start()
    it = iter(loader)
    try:
        for i, b in enumerate(it):
            got += [int(v) for v in b["y"].tolist()]
            if i == 2 and how in ("two-seconds", "forever"):
                kids = [int(p) for p in os.listdir("/proc") if p.isdigit() and _ppid(p) == os.getpid()]
                for k in kids:
                    os.kill(k, signal.SIGSTOP)
                if how == "two-seconds":
                    threading.Timer(2.0, lambda: [os.kill(k, signal.SIGCONT) for k in kids]).start()
    except FeedlineError as e:
        err = type(e).__name__ + ": " + str(e)[:200]
    t0 = time.monotonic()
    loader.close()
    kept = ("forkserver", "resource_tracker")  # multiprocessing keeps both for the next loader
    others = [p for p in os.listdir("/proc") if p.isdigit() and _ppid(p) == os.getpid()
              and not any(k in open(f"/proc/{p}/cmdline", "rb").read().decode("utf-8", "replace") for k in kept)]
    report(got=got, err=err, close_s=time.monotonic() - t0, after={**usage(shm), "children": len(others)})
import signal
"""


def stop_cont_case(h: ModuleType, how: str) -> CaseFn:
    """Process workers (or the forkserver) stopped by SIGSTOP: continued after 2 s, the epoch
    is whole; stopped for good, ``timeout=`` raises ``LoaderTimeout`` and ``close()`` ends the
    stopped workers (SIGTERM waits on a stopped process; SIGKILL does not); nothing left."""

    def run(tmp: Path) -> str:
        shm = tmp / "shm"
        shm.mkdir()
        res = r12.child(h, STOP_CONT, how, str(shm), timeout=150)
        kind, value = r12.verdict(h, res)
        if kind == "error":
            raise h.Failure(f"the loader raised: {value}")
        after = value["after"]
        if after["children"] or after["arenas"]:
            raise h.Failure(f"left behind: {after}")
        if how == "forever":
            if not (value["err"] or "").startswith("LoaderTimeout"):
                raise h.Failure(f"stopped workers under timeout=3: {value['err']!r}, {len(value['got'])} samples")
            if value["close_s"] > 15:
                raise h.Failure(f"close() took {value['close_s']:.1f} s over stopped workers")
            return f"{value['err'][:80]}; close {value['close_s']:.1f} s"
        if value["err"] or value["got"] != list(range(64)):
            raise h.Failure(f"{how}: {len(value['got'])} of 64 samples, error {value['err']!r}")
        return "ok: 64 samples in order"

    return run


# ----------------------------------------------------------------------------- death by signal

DEATH = """
def main():
    from faults_helpers import Numbers
    sig, shm = getattr(signal, sys.argv[1]), sys.argv[2]
    got = []
    with feedline.Loader(Numbers(400), batch_size=4, workers=2, worker_type="process", shuffle=False,
                         drop_last=False, timeout=60, shm_dir=shm) as loader:
        for i, b in enumerate(loader):
            got += [int(v) for v in b["y"].tolist()]
            if i == 3:
                kids = [int(p) for p in os.listdir("/proc") if p.isdigit() and _ppid(p) == os.getpid()]
                print("KIDS " + json.dumps(kids), flush=True)
                os.kill(os.getpid(), sig)
                time.sleep(0.2)
    report(got=got, after=usage(shm))
import signal
"""


def death_case(h: ModuleType, signame: str) -> CaseFn:
    """The training process ended by a signal it does not handle, mid-epoch with process
    workers: it dies of that signal, and no worker process or arena outlives it. SIGPIPE,
    which Python ignores, changes nothing: the epoch is whole."""

    def run(tmp: Path) -> str:
        shm = tmp / "shm"
        shm.mkdir()
        res = r12.child(h, DEATH, signame, str(shm), timeout=120)
        kids = [int(k) for ln in res.stdout.splitlines() if ln.startswith("KIDS ")
                for k in __import__("json").loads(ln[5:])]
        if "Traceback" in res.stderr:
            raise h.Failure(f"traceback: {res.stderr[-600:]}")
        if signame == "SIGPIPE":
            kind, value = r12.verdict(h, res)
            if kind != "ok" or value["got"] != list(range(400)):
                raise h.Failure(f"SIGPIPE (ignored by Python) changed the epoch: {str(value)[:200]}")
        elif res.returncode != -getattr(signal, signame):
            raise h.Failure(f"exit {res.returncode}, not killed by {signame}: {res.stderr[-400:]}")
        t0 = time.monotonic()
        alive = kids
        while alive and time.monotonic() - t0 < 10:
            alive = [k for k in kids if _alive(k)]
            time.sleep(0.1)
        if alive:
            raise h.Failure(f"{len(alive)} worker processes outlived the training process ({signame})")
        left = [n for n in os.listdir(shm) if n.startswith("feedline-")]
        if left:
            raise h.Failure(f"arenas left after {signame}: {left}")
        return f"exit {res.returncode}; {len(kids)} workers gone, no arena"

    return run


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# ----------------------------------------------------------------------------- preemption

PREEMPT = """
import signal
from feedline.checkpoint import Checkpointer

def main():
    ds_dir, ckdir, wt, phase = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    ck = Checkpointer(ckdir, keep=2)
    loader = feedline.Loader(ds_dir, batch_size=8, workers=2, worker_type=wt, shuffle=True, seed=5,
                             drop_last=False, timeout=60)
    weights = np.zeros(1000, np.float64)
    if phase == "resume":
        state = ck.load()
        loader.load_state_dict(state["loader"])
        weights = state["weights"]
        got = keys(loader)
        loader.close()
        report(got=got, weights=float(weights.sum()), step=ck.latest())
        return
    seen = []
    def on_term(signum, frame):
        ck.save(len(seen), {"loader": loader.state_dict(), "weights": weights})
        ck.wait()
        ck.close()
        print("SEEN " + json.dumps(seen), flush=True)
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    for i, b in enumerate(loader):
        seen.extend(str(k) for k in b["__key__"])
        weights += 1.0
        if i == 5:
            os.kill(os.getpid(), signal.SIGTERM)
    report(unexpected=True)
"""

STOPPED_SAVE = """
from feedline.checkpoint import Checkpointer
import torch

def main():
    ckdir = sys.argv[1]
    me = os.getpid()
    state = {"w": torch.arange(4_000_000, dtype=torch.float32), "step": 7}
    with Checkpointer(ckdir) as ck:
        stopper = subprocess.Popen([sys.executable, "-c",
            f"import os, signal, time; time.sleep(0.01); os.kill({me}, signal.SIGSTOP); time.sleep(2);"
            f" os.kill({me}, signal.SIGCONT)"])
        for step in range(1, 6):
            ck.save(step, state)
        ck.wait()
        stopper.wait()
    back = Checkpointer(ckdir).load()
    report(ok=bool(torch.equal(back["w"], state["w"])), step=back["step"])
import subprocess
"""


def preempt_case(h: ModuleType, worker_type: str) -> CaseFn:
    """A pre-emption: SIGTERM mid-epoch, whose handler saves the loader's state and the
    weights through a ``Checkpointer`` and exits 0; a new process loads the latest checkpoint
    and reads exactly the samples the first one had not seen."""

    def run(tmp: Path) -> str:
        import json

        ds, keys = r12.dataset(h, 203, 8)
        first = r12.child(h, PREEMPT, str(ds), str(tmp / "ck"), worker_type, "train", timeout=150)
        if first.returncode != 0 or "Traceback" in first.stderr:
            raise h.Failure(f"the pre-empted run: exit {first.returncode}: {first.stderr[-600:]}")
        seen_lines = [ln for ln in first.stdout.splitlines() if ln.startswith("SEEN ")]
        if not seen_lines:
            raise h.Failure(f"the SIGTERM handler did not run: {first.stdout[-300:]}")
        seen = json.loads(seen_lines[0][5:])
        second = r12.child(h, PREEMPT, str(ds), str(tmp / "ck"), worker_type, "resume", timeout=150)
        kind, value = r12.verdict(h, second)
        if kind != "ok":
            raise h.Failure(f"resume: {value}")
        rest = value["got"]
        if sorted(seen + rest) != sorted(keys) or len(seen) != 48:
            raise h.Failure(f"seen {len(seen)} + resumed {len(rest)} samples are not the epoch's {len(keys)} once each")
        if value["weights"] != 6 * 1000 or value["step"] != 48:
            raise h.Failure(f"the checkpoint holds weights sum {value['weights']} step {value['step']}")
        return f"ok: {len(seen)} + {len(rest)} samples, weights and step restored"

    return run


def stopped_save_case(h: ModuleType) -> CaseFn:
    def run(tmp: Path) -> str:
        res = r12.child(h, STOPPED_SAVE, str(tmp / "ck"), timeout=150)
        kind, value = r12.verdict(h, res)
        if kind != "ok" or not value["ok"] or value["step"] != 7:
            raise h.Failure(f"after a SIGSTOP of 2 s mid-save: {value}")
        return "ok: the last save loads equal"

    return run


# ----------------------------------------------------------------------------- foreign state

FOREIGN = """
def main():
    from faults_helpers import Numbers
    ds_dir, how = sys.argv[1], sys.argv[2]
    n = 203
    if how == "packed-into-map":
        with feedline.Loader(ds_dir, batch_size=8, workers=1, seed=2) as a:
            it = iter(a); next(it); next(it)
            state = a.state_dict()
        with feedline.Loader(Numbers(n), batch_size=8, workers=1, seed=2) as b:
            b.load_state_dict(state)
            report(got=len(keys(b)))
        return
    if how == "while-iterating":
        with feedline.Loader(ds_dir, batch_size=8, workers=2, seed=2, drop_last=False) as a:
            it = iter(a)
            first = [str(k) for _ in range(3) for k in next(it)["__key__"]]
            state = a.state_dict()
            more = [str(k) for _ in range(2) for k in next(it)["__key__"]]
            a.load_state_dict(state)      # back to batch 3, while `it` is live
            rest = keys(a)
        report(first=first, more=more, rest=rest)
        return
    if how == "after-the-epoch":
        with feedline.Loader(ds_dir, batch_size=8, workers=2, seed=2, drop_last=False) as a:
            whole = keys(a)
            state = a.state_dict()
        with feedline.Loader(ds_dir, batch_size=8, workers=2, seed=2, drop_last=False) as b:
            b.load_state_dict(state)
            after = keys(b)
            again = keys(b)
        report(whole=whole, after=after, again=again)
        return
    raise ValueError(how)
"""


def foreign_state_case(h: ModuleType, how: str) -> CaseFn:
    def run(tmp: Path) -> str:
        ds, keys = r12.dataset(h, 203, 8)
        res = r12.child(h, FOREIGN, str(ds), how, timeout=150)
        kind, value = r12.verdict(h, res, "fingerprint", "iterat", "state")
        if how == "packed-into-map":
            if kind == "ok":
                raise h.Failure(f"a packed dataset's state was taken by a map-style loader ({value})")
            return value
        if kind == "error":
            return value
        if how == "while-iterating":
            if sorted(value["first"] + value["rest"]) != sorted(keys):
                raise h.Failure(f"after load_state_dict mid-pass: first {len(value['first'])} + rest "
                                f"{len(value['rest'])} samples are not the epoch once each")
            return f"ok: {len(value['first'])} + {len(value['rest'])} samples"
        if sorted(value["whole"]) != sorted(keys):
            raise h.Failure("the first epoch was not whole")
        if value["after"] and sorted(value["after"]) != sorted(keys):
            raise h.Failure(f"after an ended epoch's state: {len(value['after'])} samples, neither none nor an epoch")
        if sorted(value["again"]) != sorted(keys):
            raise h.Failure("the epoch after that was not whole")
        return f"ok: {len(value['after'])} samples right after, then a whole epoch"

    return run


# ----------------------------------------------------------------------------- cli paths

def cli_paths_case(h: ModuleType, how: str) -> CaseFn:
    """Output folders that are the source in disguise, and a source given twice: refused
    (exit 2 naming the path) or a dataset of each file once; the source tree unchanged."""

    def run(tmp: Path) -> str:
        src = tmp / "src"
        src.mkdir()
        truth = {}
        for i in range(6):
            data = os.urandom(200 + i)
            (src / f"f{i}.bin").write_bytes(data)
            truth[f"f{i}"] = data
        before = h.tree_digest(src)
        if how == "out-link-into-src":
            (tmp / "link").symlink_to(src / "inner", target_is_directory=True)
            (src / "inner").mkdir()
            before = h.tree_digest(src)
            args = [str(src), "--out", str(tmp / "link")]
            out = tmp / "link"
        elif how == "out-is-src-via-dotdot":
            args = [str(src), "--out", str(src / ".." / "src")]
            out = src
        elif how == "src-twice":
            args = [str(src), str(src), "--out", str(tmp / "ds")]
            out = tmp / "ds"
        elif how == "src-and-its-link":
            (tmp / "alias").symlink_to(src, target_is_directory=True)
            args = [str(src), str(tmp / "alias"), "--out", str(tmp / "ds")]
            out = tmp / "ds"
        else:
            raise ValueError(how)
        res = h.cli("pack", *args, "-q", timeout=60)
        verdict = h.cli_clean(res, codes=(0, 1, 2), names=("src", "twice", "source", "link", "alias"))
        if res.returncode == 0:
            if how == "out-is-src-via-dotdot":
                raise h.Failure(f"packed into the source folder ({how})")
            got = h.payloads(out)
            if sorted(got) != sorted(truth.values()):
                raise h.Failure(f"{how}: {len(got)} payloads, not the {len(truth)} sources once each")
            if how == "out-link-into-src":  # a folder under SRC is allowed, left out of the sources
                again = h.cli("pack", *args, "-q", timeout=60)
                h.cli_clean(again, codes=(0,))
                if sorted(h.payloads(out)) != sorted(truth.values()):
                    raise h.Failure("a rerun into a folder under SRC (through a link) packed its own output")
                return "exit 0 twice: the output under SRC is left out of the sources"
        after = h.tree_digest(src)
        if after != before:
            raise h.Failure(f"the source tree changed: {sorted(set(after) ^ set(before))[:5]}")
        return verdict

    return run


# ----------------------------------------------------------------------------- the list

def cases(h: ModuleType) -> list[tuple[str, str, CaseFn]]:
    out: list[tuple[str, str, CaseFn]] = []
    for how in ("shard-is-folder", "shard-hardlink-to-another", "manifest-fifo", "index-fifo", "index-dev-zero",
                "dataset-is-a-file"):
        out.append(("odd-files", f"{how}-api", odd_file_case(h, how, "api")))
    for how in ("shard-is-folder", "manifest-fifo", "index-fifo"):
        out.append(("odd-files", f"{how}-verify", odd_file_case(h, how, "verify")))
    out.append(("odd-files", "shard-is-folder-inspect", odd_file_case(h, "shard-is-folder", "inspect")))
    for wt in ("thread", "process"):
        for how in ("generator", "systemexit", "keyboardinterrupt", "badstr", "nopickle"):
            out.append(("user-code", f"{how}-{wt}", user_code_case(h, wt, how)))
    for how in ("len-long", "len-negative", "len-float", "len-huge"):
        out.append(("user-code", f"{how}-thread", user_code_case(h, "thread", how)))
    for how in ("two-seconds", "forever", "forkserver"):
        out.append(("stop-cont", how, stop_cont_case(h, how)))
    for sig in ("SIGHUP", "SIGUSR1", "SIGALRM", "SIGXCPU", "SIGPIPE"):
        out.append(("death", sig, death_case(h, sig)))
    for wt in ("thread", "process"):
        out.append(("preempt", f"sigterm-saves-and-resumes-{wt}", preempt_case(h, wt)))
    out.append(("preempt", "sigstop-mid-save", stopped_save_case(h)))
    for how in ("packed-into-map", "while-iterating", "after-the-epoch"):
        out.append(("foreign-state15", how, foreign_state_case(h, how)))
    for how in ("out-link-into-src", "out-is-src-via-dotdot", "src-twice", "src-and-its-link"):
        out.append(("cli-paths", how, cli_paths_case(h, how)))
    return out


_ = (Any, subprocess, sys)
