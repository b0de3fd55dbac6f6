"""Inside the process ``feedline diagnose`` runs: measure the user's script, change nothing.

The parent puts a generated ``sitecustomize.py`` first on ``PYTHONPATH``; it
calls :func:`bootstrap` in the training process only (the process claims
itself through ``FEEDLINE_DIAGNOSE_PID``, so its subprocesses, DataLoader
workers included, stay untouched). :func:`bootstrap` starts a
:class:`~feedline.observe._session.Session` (whose hooks see every DataLoader
and feedline.Loader ``next()`` on any thread) and a :class:`Child` that writes
the report:

* at interpreter exit (also after ``--steps`` ends the run);
* on SIGTERM, when the script has no handler of its own: the report is
  written, then the signal is delivered again with its default action, so the
  exit status stays "killed by SIGTERM";
* before ``os._exit`` and before ``os.exec*`` replaces the program (the exec'd
  program, if it is Python, is measured on: it keeps this report unless it
  iterates a loader itself);
* as a partial result when a loader reaches 16, 64, 256... steps and every few
  seconds (on a background thread; the timed ones take at most about 0.5% of
  the run's time, the others a geometric series of it), so a script killed by
  SIGKILL, the OOM killer, a segfault or ``os._exit`` still leaves the steps
  it ran. A partial result is the session's raw measurements
  (:func:`~feedline.observe._snapshot.snapshot`, a copy of lists): the
  ``diagnose`` process builds the report from it, only if it needs it, so
  the training process never spends its CPU and GIL on analysis mid-run.

Processes the command starts are measured too when they train (ranks of
``torch.multiprocessing.spawn``, torchrun workers, a launcher's ``python
train.py``: :mod:`feedline.observe._descendant`; a ``multiprocessing.Process``
forked from a measured process: the hooks call :func:`start_forked` at its first
``iter(DataLoader)``); each writes ``proc-<pid>.json`` beside the command's
report, and ``feedline diagnose`` picks one when the command's own process did
not train. A forked process inherits this process's :class:`Child` (and its
atexit entry and SIGTERM handler), which then does nothing there.

At the ``--steps`` limit on the main thread the run ends with ``SystemExit(0)``;
on another thread (a producer thread feeding a queue) the report is written
and the process exits with status 0 at once, since a thread cannot end the
process by raising.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

from feedline.observe._scratch import open_text
from feedline.observe._session import Session
from feedline.observe._snapshot import snapshot

CONFIG_ENV = "FEEDLINE_DIAGNOSE"
PID_ENV = "FEEDLINE_DIAGNOSE_PID"
MAX_RESULT_SPANS = 200_000
PROC_PREFIX = "proc-"
"""Results of processes the command started are ``proc-<pid>.json`` (and ``.partial.json``)."""
PARTIAL_DUTY = 0.005
"""Largest share of the run's time the partial-report thread may take."""


PIECE_ITEMS = 2048
"""A list longer than this is written a slice at a time (:func:`json_pieces`)."""
PAUSE_EVERY = 1 << 16
"""Characters of JSON a partial report writes before it pauses (:func:`_write_atomic`)."""
PAUSE_S = 0.0002


def json_pieces(value: Any, limit: int = PIECE_ITEMS) -> Iterator[str]:
    """``value`` as JSON text in pieces, each a bounded amount of encoding: a dict key by
    key, a list longer than ``limit`` a slice at a time, a short list of dicts element by
    element. ``"".join`` of the pieces is ``json.dumps(value)`` up to spacing."""
    if isinstance(value, dict):
        yield "{"
        for i, (k, v) in enumerate(value.items()):
            yield ("," if i else "") + json.dumps(str(k)) + ":"
            yield from json_pieces(v, limit)
        yield "}"
    elif isinstance(value, list) and len(value) > limit:
        yield "["
        for i in range(0, len(value), limit):
            yield ("," if i else "") + json.dumps(value[i:i + limit])[1:-1]
        yield "]"
    elif isinstance(value, list) and 0 < len(value) <= 64 and isinstance(value[0], dict):
        yield "["
        for i, v in enumerate(value):
            if i:
                yield ","
            yield from json_pieces(v, limit)
        yield "]"
    else:
        yield json.dumps(value)


def _write_atomic(path: Path, data: dict[str, Any], pause: bool = False) -> None:
    """Write ``data`` as JSON to ``path`` atomically. ``pause``: a partial report, written
    while the run goes on: a pause every :data:`PAUSE_EVERY` characters hands the GIL to the
    training thread (one ``json.dumps`` of a long run's measurements held it for tens of
    milliseconds, a stall the run would not have had)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open_text(tmp, "w") as fh:  # its folder made again if a temp cleaner removed it
        if not pause:
            fh.write(json.dumps(data))
        else:
            since = 0
            for piece in json_pieces(data):
                fh.write(piece)
                since += len(piece)
                if since >= PAUSE_EVERY:
                    since = 0
                    time.sleep(PAUSE_S)
    os.replace(tmp, path)


class Child:
    """Writes the report of ``session`` to ``result`` (and partial ones to ``partial``)."""

    def __init__(self, session: Session, result: Path, partial: Path, partial_every: float,
                 exec_image: bool = False) -> None:
        self.session, self.result, self.partial = session, result, partial
        self.exec_image = exec_image
        """This program was exec'd by the measured one (same pid): the report that one
        wrote before the exec stays unless this one measures a loader."""
        self.partial_every = partial_every
        self._lock = threading.RLock()  # _finish_once holds it around _write_result
        self._done = False
        self._finishing: set[int] = set()
        """Threads inside :meth:`finish` (a SIGTERM handler run there must not wait for it)."""
        self._stop = threading.Event()
        self._due = threading.Event()
        self._pid = os.getpid()
        self.process: dict[str, Any] | None = None
        """A descendant's pid and rank (when known): ``host["process"]`` of its report."""

    def start(self) -> None:
        atexit.register(self._at_exit)
        mp = sys.modules.get("multiprocessing")
        if mp is not None and mp.parent_process() is not None:
            # a multiprocessing child ends with os._exit, after its finalizers, not atexit
            import multiprocessing.util

            multiprocessing.util.Finalize(None, self.finish, exitpriority=100)
        handler = signal.getsignal(signal.SIGTERM)
        inherited = isinstance(getattr(handler, "__self__", None), Child)  # forked from one
        if threading.current_thread() is threading.main_thread() and (
                handler == signal.SIG_DFL or inherited):
            signal.signal(signal.SIGTERM, self._on_sigterm)
        if self.partial_every > 0:
            threading.Thread(target=self._partials, name="feedline-partial", daemon=True).start()
        for name in ("_exit", "execv", "execve"):  # os.execl/execvp/... call these two
            setattr(os, name, self._finishing_first(getattr(os, name)))

    def _finishing_first(self, real: Any) -> Any:
        """``real`` (``os._exit``, ``os.execv``, ``os.execve``), which ends this program
        without atexit, preceded by its report in this process (not in a forked one, nor
        in a SIGTERM handler run while the report is written): the final one before
        ``os._exit``; before an exec, the report so far, the session still running (an
        exec that fails goes on, and the final report at the real end replaces it)."""
        ends = real.__name__ == "_exit"

        def call(*args: Any, **kwargs: Any) -> Any:
            if os.getpid() == self._pid and threading.get_ident() not in self._finishing:
                if ends:
                    self.finish()
                else:
                    self._write_result(final=False)
            return real(*args, **kwargs)

        call.__name__, call.__doc__, call.__wrapped__ = real.__name__, real.__doc__, real  # type: ignore[attr-defined]
        return call

    def on_limit(self) -> NoReturn:
        """The ``--steps`` limit: end the run (from any thread)."""
        self.session.notes.append(f"run stopped by diagnose after {self.session.steps} steps")
        if threading.current_thread() is threading.main_thread():
            raise SystemExit(0)
        self.finish()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    def _at_exit(self) -> None:
        self.finish()
        if os.getpid() == self._pid:
            keep_keyboard_interrupt_exit()

    def finish(self) -> None:
        """Write the final report (once; later calls do nothing, as do calls in a process
        forked from this one, which inherits this object and its atexit entry)."""
        if os.getpid() != self._pid:
            return
        me = threading.get_ident()
        self._finishing.add(me)
        try:
            self._finish_once()
        finally:
            self._finishing.discard(me)

    def _finish_once(self) -> None:
        with self._lock:
            if self._done:
                return
            self._done = True
            self._stop.set()
            self._due.set()
            self._write_result(final=True)

    def _write_result(self, final: bool) -> None:
        """Write the report to ``result``: the final one (the session stopped), or the
        report so far; nothing after the final one."""
        with self._lock:
            if not final and self._done:
                return
            if self.exec_image and not self.session.clocks.clocks and self.result.exists():
                return  # the exec'd program measured nothing: the report before the exec stays
            try:
                rep = self.session.report() if final else self.session.partial_report()
                if self.process is not None:
                    rank = self.process.get("rank")
                    rep.host = rep.host | {"process": self.process | {
                        "rank": _rank() if rank is None else rank}}
                data = rep.to_dict(include_spans=True)
                data["spans"] = data["spans"][:MAX_RESULT_SPANS]
                _write_atomic(self.result, data)
            except Exception:  # report the failure loudly; the user's exit status stays intact
                print("feedline diagnose: could not write the report:", file=sys.stderr)
                traceback.print_exc()

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        if os.getpid() == self._pid and threading.get_ident() in self._finishing:
            # a second SIGTERM (sent to the process group and forwarded by diagnose too)
            # while this thread writes the report: the finish under way ends the run
            # (waiting for it here, on its own thread, would never end)
            return
        if os.getpid() == self._pid:
            self.session.notes.append("the run was ended by SIGTERM")
            self.finish()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def milestone(self) -> None:
        """A loader reached 16, 64, 256... steps: keep a partial result now (off this thread)."""
        self._due.set()

    def _partials(self) -> None:
        wait = self.partial_every
        while True:
            self._due.wait(wait)
            self._due.clear()
            if self._stop.is_set():
                return
            t0 = time.perf_counter()
            try:
                data = {"snapshot": snapshot(self.session), "process": self.process}
                with self._lock:
                    if self._done:
                        return
                    _write_atomic(self.partial, data, pause=True)
            except Exception as e:  # never disturb the run; say it once and stop trying
                print(f"feedline diagnose: no partial report ({type(e).__name__}: {e})",
                      file=sys.stderr)
                return
            wait = max(self.partial_every, (time.perf_counter() - t0) / PARTIAL_DUTY)


def settle() -> None:
    """One full garbage collection, before the user's script starts.

    The objects of diagnose's own start-up (its imports) count towards
    CPython's next full collection, which then ran during the user's first
    steps: 80-180 ms with torch loaded, a collection the plain run does not
    have at that point (found with per-step times of
    ``bench/diagnose_overhead.py``'s script). A full collection here leaves the
    process as CPython leaves it after any full collection, before the user's
    code runs.
    """
    gc.collect()


def result_paths(cfg: dict[str, Any], pid: int | None) -> tuple[Path, Path]:
    """Where a process writes its final and partial results: the command's own process
    (``pid`` None) at the configured paths, a descendant at ``proc-<pid>.json`` and
    ``proc-<pid>.partial.json`` beside them."""
    result, partial = Path(cfg["result"]), Path(cfg["partial"])
    if pid is None:
        return result, partial
    return result.with_name(f"{PROC_PREFIX}{pid}.json"), partial.with_name(
        f"{PROC_PREFIX}{pid}.partial.json")


def _rank() -> int | None:
    """This process's rank in torch.distributed, when it has joined a process group."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except (RuntimeError, ValueError):
        pass
    rank = os.environ.get("RANK")
    return int(rank) if rank is not None and rank.isdigit() else None


def start_forked() -> None:
    """Measure this process, forked from a measured one, from its first loader on."""
    bootstrap(descendant=True)


def keep_keyboard_interrupt_exit() -> None:
    """At exit after the main module raised KeyboardInterrupt (Ctrl-C nobody caught),
    keep CPython's ending: it kills itself by SIGINT (status 130 in a shell). CPython
    forgets that it should whenever code compiled from a string runs afterwards (an
    ``exec``, a dataclass or namedtuple made by a module imported while the report is
    built), and the run would end with status 1; an ``exec`` that ends in
    KeyboardInterrupt marks it again, as the main module's did."""
    last = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    if type(last) is not KeyboardInterrupt:
        return
    try:
        exec("raise KeyboardInterrupt")  # a constant string: sets CPython's mark
    except KeyboardInterrupt:
        pass


def bootstrap(descendant: bool = False) -> None:
    """Start measuring this process (called from the generated sitecustomize for the
    command's own process; ``descendant``: from :mod:`feedline.observe._descendant`, in a
    process the command started, at its first loader iteration)."""
    cfg = json.loads(Path(os.environ[CONFIG_ENV]).read_text(encoding="utf-8"))
    exec_image = os.environ.get(PID_ENV) == str(os.getpid())  # claimed by the program that exec'd this one
    os.environ[PID_ENV] = str(os.getpid())  # claimed: its own subprocesses stay untouched
    asked = cfg.get("device") or "auto"
    later = asked == "auto" and "torch" not in sys.modules
    holder: list[Child] = []
    session = Session(cfg.get("name") or "run", "cpu" if later else _device(asked), steps=cfg.get("steps"),
                      ab=bool(cfg.get("ab")), replay=int(cfg.get("replay") or 10),
                      on_end=lambda: holder[0].on_limit())
    session.on_fork = start_forked
    if float(cfg.get("partial_every", 5.0)) > 0:
        session.clocks.on_milestone = lambda: holder[0].milestone()
    result, partial = result_paths(cfg, os.getpid() if descendant else None)
    child = Child(session, result, partial, float(cfg.get("partial_every", 5.0)), exec_image=exec_image)
    if descendant:
        child.process = {"pid": os.getpid(), "rank": _rank()}  # the group may be gone at exit
    holder.append(child)
    if not descendant:
        settle()  # a descendant starts mid-run: a full collection now would be the tool's cost
    session.start()
    child.start()
    if "torch" not in sys.modules:
        when_torch_loads(session, asked)


def _device(asked: str) -> str:
    """Where the loop runs: ``asked``, or for ``"auto"`` the first GPU when torch sees one."""
    if asked != "auto":
        return asked
    import torch

    return "cuda:0" if torch.cuda.is_available() else "cpu"


def when_torch_loads(session: Session, asked: str) -> None:
    """Install ``session``'s torch hooks once the script's ``import torch`` has run, not
    before: importing torch for a script that never does (a launcher that starts
    ``python train.py``, a shell's ``python export.py`` after training) cost it 1-2 s of
    CPU and changed its ``sys.modules``. Without torch there is no DataLoader to hook,
    and a feedline.Loader imports it. A hook that fails says so and leaves the import be."""
    from feedline.observe._descendant import AfterImport

    def attach(module: Any) -> None:
        try:
            session.attach_torch(_device(asked) if asked == "auto" else None)
        except Exception:  # the script's import goes on, unmeasured, rather than fail
            print("feedline diagnose: could not install the torch hooks:", file=sys.stderr)
            traceback.print_exc()

    sys.meta_path.insert(0, AfterImport("torch", attach))
