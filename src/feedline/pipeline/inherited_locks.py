"""A forked worker blocked for ever on a lock it inherited held, told apart from a slow one.

:mod:`feedline.pipeline.forking` forks only while no other thread runs, but the thread
that forks can itself hold a lock at that instant (``with lock:`` around the loop that
starts the loader, a cache's lock held while the first batch is asked for), and a native
library's thread or mutex is invisible to it. The worker inherits that lock held, and
nobody in the worker will ever release it: the first sample whose code takes it waits
for ever (a ``LoaderTimeout`` with ``timeout=``, else a silent hang).

From outside, that wait is certain, not a guess: the worker has one thread, and it
sleeps in a *private* futex wait with no timeout (a Python lock, a ``pthread`` mutex or
condition). A private futex can be woken only by a thread of the same process, and
there is no other one. A worker reading a slow disk, sleeping, computing or waiting on a
lock shared with another process (a ``multiprocessing.Lock``: not private) is never
taken for it.

While a batch is late the consumer asks (:meth:`feedline.pipeline.workers_process.
ProcessWorkers.stuck`, once a second); for a stuck worker the error names the line its
Python code waits at: each forked worker arms :mod:`faulthandler` on
:data:`STACK_SIGNAL` to write its stack into a pipe the training process reads
(:func:`arm`, :func:`stack_of`).
"""

from __future__ import annotations

import faulthandler
import os
import platform
import re
import select
import signal
import time

from feedline.errors import WorkerError

STACK_SIGNAL = signal.SIGUSR2
"""The signal a forked worker answers with its Python stack (written by faulthandler)."""

_FUTEX_NR = {"x86_64": 202, "aarch64": 98, "arm64": 98}
_FUTEX_PRIVATE_FLAG = 128
_FUTEX_CLOCK_REALTIME = 256
_FUTEX_WAITS = {0, 6, 9, 13}  # WAIT, LOCK_PI, WAIT_BITSET, LOCK_PI2
_FRAME = re.compile(r'File "(?P<file>[^"]*)", line (?P<line>\d+) in (?P<func>\S+)')


def blocked_for_good(pid: int) -> bool:
    """Whether process ``pid`` has one thread, asleep in a private futex wait without a
    timeout: nothing can wake it but a signal (see the module docstring). False where it
    cannot be told (no ``/proc``, another architecture, the process gone)."""
    nr = _FUTEX_NR.get(platform.machine())
    try:
        threads = len(os.listdir(f"/proc/{pid}/task"))
        with open(f"/proc/{pid}/syscall") as f:
            fields = f.read().split()
    except OSError:
        return False
    if nr is None or threads != 1 or len(fields) < 5 or fields[0] != str(nr):
        return False
    op, timeout = int(fields[2], 16), int(fields[4], 16)
    cmd = op & ~(_FUTEX_PRIVATE_FLAG | _FUTEX_CLOCK_REALTIME)
    return bool(op & _FUTEX_PRIVATE_FLAG) and cmd in _FUTEX_WAITS and timeout == 0


def arm(fd: int) -> None:
    """In a forked worker: answer :data:`STACK_SIGNAL` with the stack, written to ``fd``
    (after :func:`feedline.pipeline.forking.after_fork_in_child`, which resets handlers)."""
    faulthandler.register(STACK_SIGNAL, file=fd, all_threads=True, chain=False)


def stack_of(pid: int, fd: int, wait_s: float = 1.0) -> str:
    """The stack worker ``pid`` writes to ``fd`` (its pipe's read end) when signalled;
    empty when it does not answer within ``wait_s``."""
    try:
        os.kill(pid, STACK_SIGNAL)
    except OSError:
        return ""
    chunks: list[bytes] = []
    deadline = time.monotonic() + wait_s
    while True:  # faulthandler writes line by line: read until it pauses
        left = deadline - time.monotonic() if not chunks else 0.1
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            break
        data = os.read(fd, 65536)
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks).decode("utf-8", "replace")


def innermost(stack: str) -> str | None:
    """``file:line in function`` of the innermost frame of a faulthandler stack."""
    m = _FRAME.search(stack)
    return f"{m['file']}:{m['line']} in {m['func']}" if m else None


def stuck_error(worker: str, stack: str) -> WorkerError:
    """The error for forked ``worker``, blocked for good; ``stack``: what it answered."""
    where = innermost(stack)
    at = f" at {where}" if where else ""
    err = WorkerError(
        f"process worker {worker} waits for ever on a lock{at}: no thread in the worker "
        "can release it (the worker was forked from the training process while a thread "
        "there held that lock)",
        worker=worker, stage="fork",
        fix='use start_method="forkserver" (workers start without the training process\'s '
            "locks), or do not hold the lock while the loader starts its workers (its first "
            "iter())")
    err.__dict__.update(exc_type="deadlock", traceback_text=stack or None)
    return err
