"""``start_method="fork"`` (the default): whether forking the training process for process workers is
safe now, and what a forked worker resets first.

A forked worker starts in milliseconds and inherits the dataset and the transforms (no
torch import, no pickling), as torch's DataLoader workers do on Linux. It also inherits
the state of every other thread of the process at the instant of the fork: a lock one of
them held (in the dataset, a logging handler, a library) stays held in the child forever,
and the child hangs on it. So fork is used only when it is safe by rule, and otherwise the
loader starts its workers with the forkserver and says why in ``loader.stats``
(:func:`refusal`):

* no other Python thread is alive in the process besides the one starting the workers
  (``threading.enumerate()``: a metrics or checkpoint thread, pytest-timeout's timer
  thread: each is a reason), except tqdm's monitor parked in its wait (``for batch in
  tqdm(loader)`` starts it before the workers: without this exception no script with a
  progress bar forked; :func:`_parked_monitor`) and feedline's own threads that stop for a
  fork (:data:`GATE`: another process loader's result reader, so a validation loader
  started while the training loader lives forks too): each does its work inside
  ``GATE.working()`` and blocks (``select``) outside it, and the forking thread holds
  ``GATE.stopped()`` while it forks, so none of them holds a lock at the fork;
* CUDA is not initialised, or the workers would not touch it: only a dataset that reads
  into device memory does (a worker that calls CUDA itself gets torch's "Cannot
  re-initialize CUDA in forked subprocess" as a :class:`feedline.errors.WorkerError`
  whose fix names the forkserver);
* ``SIGCHLD`` has its default disposition: a script that ignores it
  (``signal.signal(SIGCHLD, SIG_IGN)``: the kernel then reaps every child at exit) or
  handles it (a server's handler calling ``os.waitpid(-1, ...)``) would take the forked
  workers' exit status, so a worker killed by the OOM killer would read as "exit code None"
  and closing the loader would fail on a worker it cannot reap (the forkserver's workers
  are the forkserver's children, out of that handler's reach). torch DataLoader's own
  handler, which the first DataLoader with workers installs for good, takes no status
  (``waitid`` with ``WNOWAIT``, its own workers only) and does not refuse the fork;
* Python 3.12 or later: the process has one OS thread (``/proc/self/task``; 3.12 warns
  that a fork of a multi-threaded process may deadlock, and counts native threads such as
  torch's intra-op pool too).

The forking thread itself may hold a lock at the fork (``with lock:`` around the loop); a
worker whose dataset takes it then waits for ever, and the consumer says so within about a
second instead of a ``LoaderTimeout`` or a hang (:mod:`feedline.pipeline.inherited_locks`).

In the child (:func:`after_fork_in_child`), before any job: the parent's Python signal
handlers (a training script's SIGTERM checkpoint handler, feedline's deferred signals)
are reset to the default, SIGINT is ignored (the parent handles Ctrl-C), and every object
inherited from the parent is moved out of the garbage collector's reach (``gc.freeze``),
so a collection in the worker never runs a parent object's finaliser (an arena's unlink, a
file's close). Interpreter exit runs no ``atexit`` handler of the parent
(multiprocessing's forked children end with ``os._exit``), and the worker never writes to
the parent's pinned buffers: it fills only the shared-memory arena it maps after the fork.
Dying with the parent is :func:`feedline.pipeline.workers_process` 's ``PR_SET_PDEATHSIG``,
as for the other start methods.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
import weakref
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class ForkGate:
    """feedline's threads that stop while the process forks (see the module docstring)."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        """A fresh gate (in a forked child: the parent's state, its forking thread
        included, means nothing there, and a loader the child starts uses the gate)."""
        self._lock = threading.RLock()  # entered with `with` (C): see feedline.pipeline._deferred_signals
        self._cond = threading.Condition(self._lock)
        self._working: Counter[int] = Counter()  # thread ident -> depth inside working()
        self._forking: int | None = None  # the ident of the thread forking now
        self._threads: weakref.WeakSet[threading.Thread] = weakref.WeakSet()

    def register(self, thread: threading.Thread) -> None:
        """``thread`` does all its work inside :meth:`working` (it does not keep a fork away)."""
        self._threads.add(thread)

    def stops(self, thread: threading.Thread) -> bool:
        return thread in self._threads

    @contextmanager
    def working(self) -> Iterator[None]:
        """A section of a registered thread's work (entered only while nobody forks)."""
        me = threading.get_ident()
        with self._lock:
            while self._forking is not None and self._forking != me:
                self._cond.wait()
            self._working[me] += 1
        try:
            yield
        finally:
            with self._lock:
                self._working[me] -= 1
                if not self._working[me]:
                    del self._working[me]
                self._cond.notify_all()

    @contextmanager
    def stopped(self, timeout: float = 10.0) -> Iterator[bool]:
        """Hold every registered thread outside its work while the caller forks; yields
        False (nothing held) when one did not stop within ``timeout`` seconds."""
        me = threading.get_ident()
        with self._lock:
            held = self._cond.wait_for(lambda: self._forking is None, timeout)
            if held:
                self._forking = me
                held = self._cond.wait_for(lambda: not (set(self._working) - {me}), timeout)
                if not held:
                    self._forking = None
                    self._cond.notify_all()
        if not held:
            yield False
            return
        try:
            yield True
        finally:
            with self._lock:
                self._forking = None
                self._cond.notify_all()


GATE = ForkGate()
"""The process's one gate (feedline's result readers register with it)."""
os.register_at_fork(after_in_child=GATE._reset)


SHOWN = 8
"""How many other threads' names a refusal lists (the rest are counted)."""


def refusal(ctx: Any = None) -> str | None:
    """Why the calling thread must not fork process workers now, or ``None`` when it may
    (the caller forks inside ``GATE.stopped()``).

    ``ctx``: the workers' job context (a dataset reading into device memory touches CUDA).
    """
    me = threading.current_thread()
    alive = [t for t in threading.enumerate() if t is not me and t.is_alive()]
    parked = [t for t in alive if GATE.stops(t) or _parked_monitor(t)]
    others = [t.name for t in alive if t not in parked]
    if others:
        shown = ", ".join(sorted(others)[:SHOWN]) + (f" and {len(others) - SHOWN} more" if len(others) > SHOWN else "")
        return (f"{len(others)} other thread(s) alive ({shown}): a lock one of them holds at the "
                "fork would stay held in every worker")
    chld = signal.getsignal(signal.SIGCHLD)
    if chld is not signal.SIG_DFL and not _leaves_status(chld):
        what = "ignored" if chld is signal.SIG_IGN else "handled by the script"
        return (f"SIGCHLD is {what}: the workers' exit status (a kill, a crash) would be taken "
                "before the loader could read it")
    if _cuda_initialised() and _workers_touch_cuda(ctx):
        return ("CUDA is initialised and the dataset reads into device memory: a forked worker "
                "cannot use CUDA")
    if sys.version_info >= (3, 12):
        native = os_threads()
        if native > 1 + len(parked):
            return (f"the process has {native} OS threads (native pools included): Python "
                    f"{sys.version_info[0]}.{sys.version_info[1]} warns that fork may deadlock")
    return None


TORCH_SIGCHLD = ("torch.utils.data._utils.signal_handling", "_set_SIGCHLD_handler.<locals>.handler")
"""torch DataLoader's SIGCHLD handler (module, qualified name): set by the first DataLoader
with workers and left installed for the life of the process."""


def _leaves_status(handler: Any) -> bool:
    """Whether the SIGCHLD ``handler`` takes no child's exit status: torch DataLoader's
    (it asks ``waitid(..., WNOWAIT)`` about its own workers only) wrapping nothing, or a
    handler that itself leaves status (its ``previous_handler``). Before, any handler
    refused the fork, so a script that had run one DataLoader with workers (a validation
    loader, a comparison) started every later process Loader through the forkserver: 1.5 s
    more to its first batch, 9 s for the first one (the forkserver imports torch)."""
    for _ in range(8):  # handlers chain through their previous_handler; a bounded walk
        if (getattr(handler, "__module__", None), getattr(handler, "__qualname__", None)) != TORCH_SIGCHLD:
            return False
        code, cells = getattr(handler, "__code__", None), getattr(handler, "__closure__", None) or ()
        names = getattr(code, "co_freevars", ())
        if "previous_handler" not in names:
            return False
        try:
            handler = cells[names.index("previous_handler")].cell_contents
        except (IndexError, ValueError):  # an empty cell: not the handler this reads
            return False
        if handler is None or handler is signal.SIG_DFL:
            return True
    return False


def _parked_monitor(thread: threading.Thread) -> bool:
    """Whether ``thread`` is tqdm's monitor (``tqdm_monitor``, started by the first progress
    bar: ``for batch in tqdm(loader)``) parked in its ``Event.wait`` between two checks.

    It takes tqdm's lock only for a moment every ``monitor_interval`` (10 s) after that
    wait returns, so while it waits a fork copies no lock it holds; a worker would only
    hang on that lock if it drew a progress bar itself in the microseconds' race between
    this look and the fork. Any other thread, or the monitor awake, is a reason to refuse.
    """
    if type(thread).__name__ != "TMonitor" or not type(thread).__module__.startswith("tqdm"):
        return False
    frame = sys._current_frames().get(thread.ident or -1)
    waits = 0
    while frame is not None and frame.f_code.co_filename == threading.__file__:
        waits += frame.f_code.co_name == "wait"
        frame = frame.f_back
    return waits > 0 and frame is not None and frame.f_code.co_name == "run"


def os_threads() -> int:
    """The threads of this process as the kernel counts them (1 where unknown)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def _cuda_initialised() -> bool:
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return bool(torch.cuda.is_initialized())
    except Exception:  # a torch without CUDA support
        return False


def _workers_touch_cuda(ctx: Any) -> bool:
    source = getattr(ctx, "source", None)
    dataset = getattr(source, "dataset", source)
    backend = getattr(dataset, "backend", None)
    return getattr(backend, "name", None) == "gds"


CUDA_IN_FORK = "Cannot re-initialize CUDA in forked subprocess"
"""torch's message when a forked worker calls CUDA."""

CUDA_IN_FORK_FIX = ('keep CUDA out of decode=/transform= (move batches to the GPU in the loop, '
                    'or use device=), or use start_method="forkserver"')


def after_fork_in_child() -> None:
    """What a forked worker resets before its first job (see the module docstring)."""
    gc.freeze()  # inherited objects: never collected (nor finalised) in the worker
    for sig in signal.valid_signals():
        try:
            handler = signal.getsignal(sig)
        except (ValueError, OSError):
            continue
        if callable(handler):  # a Python handler of the parent's
            try:
                signal.signal(sig, signal.SIG_DFL)
            except (ValueError, OSError):
                continue
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
