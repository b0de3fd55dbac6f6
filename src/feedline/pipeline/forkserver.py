"""The forkserver that starts process workers where fork is not used: what it imports
once (:func:`preload_forkserver`, :func:`packages_of`), and a server that died or lost its
socket mid-run replaced by a new one instead of failing every later loader."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from feedline.errors import WorkerDied

PRELOAD = ("torch", "numpy")
"""Modules the forkserver imports once, when the parent has them (see preload_forkserver)."""

WORKER_MODULE = "feedline.pipeline.workers_process"
"""Where a worker's life is defined: every worker unpickles its target from it."""


def packages_of(*objs: Any) -> list[str]:
    """The top-level packages, already imported here, that unpickling ``objs`` imports.

    Looks at each object's class (or, for a function, its module) and one level into its
    attributes and containers: a torchvision ``ImageFolder`` gives ``torchvision``, a
    dataset class of the user's module ``mydata`` holding a torchvision ``Compose`` gives
    ``mydata`` and ``torchvision``. ``__main__``, builtins and modules not imported in this
    process are left out. Cheap: nothing is pickled.
    """
    found: dict[str, None] = {}

    def note(obj: Any) -> None:
        mod = obj.__module__ if callable(obj) and hasattr(obj, "__code__") else type(obj).__module__
        top = str(mod or "").partition(".")[0]
        if top and top not in ("__main__", "builtins") and top in sys.modules:
            found.setdefault(top)

    for obj in objs:
        if obj is None:
            continue
        note(obj)
        attrs = getattr(obj, "__dict__", None)
        members = list(attrs.values()) if isinstance(attrs, dict) else []
        for value in members:
            note(value)
            if isinstance(value, (list, tuple)):
                for item in value[:64]:  # a Compose's transforms; not a dataset's samples
                    note(item)
    return list(found)


def preload_forkserver(mpctx: Any, packages: Sequence[str] = ()) -> None:
    """Let the forkserver import, once, what every worker would import again.

    A worker imports the training script (``__main__``: pickled functions live there), so
    with ``spawn`` every worker of every loader imports torch again: seconds each, all at
    once. Forked from a server that imported them, workers start with them loaded (the
    server itself is shared by every loader of the process: a second loader's workers
    start in a fraction of a second). CPython 3.11's own ``__main__`` preload never runs
    (a key mismatch in ``multiprocessing.forkserver``), hence the heavy modules by name:
    :data:`PRELOAD` when the parent has imported them, :data:`WORKER_MODULE`, and ``packages``: those
    the first loader's dataset, transform and collate come from (:func:`packages_of`;
    without them every worker of every loader imports torchvision again: 2 s per loader
    on a busy 2-core host). Only takes effect before the server starts; modules already
    asked for are kept. Imports are not CUDA: the server never touches the GPU.
    """
    from multiprocessing import forkserver

    _revive_forkserver()
    current = list(getattr(getattr(forkserver, "_forkserver", None), "_preload_modules", None) or ["__main__"])
    wanted = [m for m in (*PRELOAD, *packages, WORKER_MODULE) if m == WORKER_MODULE or m in sys.modules]
    mpctx.set_forkserver_preload(current + [m for m in wanted if m not in current])


_lost_servers: list[int] = []  # "alive" pipes of unreachable forkservers: their workers live on


def _revive_forkserver() -> None:
    """Start a new forkserver when the running one can no longer be reached.

    Its socket lives in multiprocessing's temporary folder (``$TMPDIR/pymp-*``), which a
    temp cleaner (systemd-tmpfiles, tmpreaper) may delete during a run of days: every
    later loader then failed to start its workers with a bare ``FileNotFoundError``. The
    folder is made again and the next worker start launches a new server. The old server
    is not stopped (the workers of loaders still running were forked by it and end with
    it): its "alive" pipe is kept open until this process exits.

    The server itself may have died (the OOM killer picks it: it holds torch; a ``kill``):
    every later loader then failed with a bare ``EOFError: unexpected EOF``. It is reaped
    and its "alive" pipe closed, and the next worker start launches a new one.
    """
    from multiprocessing import forkserver, process

    server = getattr(forkserver, "_forkserver", None)
    address = getattr(server, "_forkserver_address", None)
    tempdir = getattr(process.current_process(), "_config", {}).get("tempdir")
    if tempdir and not os.path.isdir(tempdir):
        os.makedirs(tempdir, mode=0o700, exist_ok=True)
    if server is None or not isinstance(address, str):
        return
    if _server_died(getattr(server, "_forkserver_pid", None)):
        _forget_server(server)
        return
    if address.startswith("\0") or os.path.exists(address):
        return
    with server._lock:
        if server._forkserver_alive_fd is not None:
            _lost_servers.append(server._forkserver_alive_fd)
        server._forkserver_address = server._forkserver_alive_fd = server._forkserver_pid = None


def _forget_server(server: Any) -> None:
    """Drop a dead (and reaped) forkserver: the next worker start launches a new one."""
    with server._lock:
        if server._forkserver_alive_fd is not None:
            os.close(server._forkserver_alive_fd)
        server._forkserver_address = server._forkserver_alive_fd = server._forkserver_pid = None


def forkserver_died(wait: float) -> bool:
    """Whether this process's forkserver has died (then it is reaped and forgotten)."""
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    if server is None or not _server_died(getattr(server, "_forkserver_pid", None), wait):
        return False
    _forget_server(server)
    return True


def _server_died(pid: Any, wait: float = 0.0) -> bool:
    """Whether the forkserver ``pid`` (a child of this process) has exited, waiting up to
    ``wait`` seconds for it to (an error path that saw its socket close: it is exiting);
    reaps it."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    deadline = time.monotonic() + wait
    while not _exited(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def _exited(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not a child of ours (or reaped already): ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except OSError:
            return False
        return False
    return done == pid


def server_gone(exc: BaseException, start_method: str) -> WorkerDied:
    """The error for a worker start that found no server to fork it (it could not start:
    an interpreter that cannot run, a failing ``sitecustomize``; it died at once)."""
    return WorkerDied(
        f"the {start_method} process that starts the workers did not answer "
        f"({type(exc).__name__}: {exc}): it exited; its error, if it printed one, is above",
        stage="start",
        fix='check that sys.executable runs for this user; or use start_method="spawn" '
            'or worker_type="thread"')
