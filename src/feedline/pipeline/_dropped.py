"""Close loaders dropped without ``close()``, with no Python code run where they die.

A loader dropped without ``close()`` (``loader = Loader(...)`` again every epoch, a
``break`` out of a notebook cell) must still stop its workers. A ``weakref.finalize`` did
it, in the thread that dropped the last reference: the training loop's own. Python checks
for signals when a function starts, and the loader's teardown runs in C (freeing the
iterator, its batches, the sampler) just before, so a Ctrl-C that arrived meanwhile was
raised at the finalizer's first line, printed as "Exception ignored in: <finalize object>"
and lost (8 of 200 Ctrl-Cs into a loop that makes and drops a loader per pass; the
deferral of :mod:`._deferred_signals` starts a line too late to catch it).

Here the loader's weakref callback is ``SimpleQueue.put`` (C): the loop goes on at once,
its signals reach it, and a thread of this module (``feedline-closer``, registered with
the fork gate, signals never run there) closes the runtime. :func:`settle` waits for the
closes queued so far; a new ``Loader`` calls it first, so the loader made in place of a
dropped one starts after that one's workers have stopped, as before. At interpreter exit
the loaders still alive are closed in the main thread (as ``weakref.finalize`` did), and
a close in progress is waited for a short while (its workers die with the process).
"""

from __future__ import annotations

import atexit
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from feedline.pipeline import forking

EXIT_WAIT_S = 2.0
"""Most seconds interpreter exit waits for a dropped loader's close in progress."""


class _Closer:
    def __init__(self) -> None:
        self.dropped: queue.SimpleQueue[weakref.ref[Any]] = queue.SimpleQueue()
        self.live: dict[int, tuple[weakref.ref[Any], Callable[[], None]]] = {}
        self.lock = threading.RLock()  # `with` on the C lock: see feedline.pipeline._deferred_signals
        self.cond = threading.Condition(self.lock)
        self.busy = 0  # closes taken off the queue and not finished
        self.thread: threading.Thread | None = None

    def watch(self, owner: object, close: Callable[[], None]) -> int:
        ref = weakref.ref(owner, self.dropped.put)  # C-level: no Python code as ``owner`` dies
        with self.lock:
            self.live[id(ref)] = (ref, close)
            if self.thread is None:
                atexit.register(self.at_exit)
                self.thread = threading.Thread(target=self._run, name="feedline-closer", daemon=True)
                forking.GATE.register(self.thread)  # it works inside GATE.working(): a fork waits
                self.thread.start()
        return id(ref)

    def forget(self, token: int) -> bool:
        with self.lock:
            return self.live.pop(token, None) is not None

    def _run(self) -> None:
        while True:
            ref = self.dropped.get()
            with self.lock:
                entry = self.live.pop(id(ref), None)
                self.busy += 1
            try:
                if entry is not None:
                    with forking.GATE.working():
                        entry[1]()
            except Exception as exc:
                import warnings

                warnings.warn(f"closing a dropped feedline Loader failed: {type(exc).__name__}: {exc}",
                              RuntimeWarning, stacklevel=1)
            finally:
                with self.lock:
                    self.busy -= 1
                    self.cond.notify_all()

    def settle(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.lock:
            while self.busy or not self.dropped.empty():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self.cond.wait(0.05 if left is None else min(left, 0.05))
        return True

    def at_exit(self) -> None:
        with self.lock:
            alive, self.live = list(self.live.values()), {}
        from feedline.pipeline._deferred_signals import deferring_signals

        for _, close in alive:
            deferring_signals(close)
        self.settle(EXIT_WAIT_S)


_CLOSER = _Closer()


def _after_fork_in_child() -> None:
    global _CLOSER
    atexit.unregister(_CLOSER.at_exit)
    _CLOSER = _Closer()  # the parent's loaders are not this process's to close


os.register_at_fork(after_in_child=_after_fork_in_child)


def watch(owner: object, close: Callable[[], None]) -> int:
    """Call ``close()`` on the closer thread once ``owner`` is dropped; a token for :func:`forget`."""
    return _CLOSER.watch(owner, close)


def forget(token: int) -> bool:
    """Stop watching (an explicit close); False when the owner was already dropped or forgotten."""
    return _CLOSER.forget(token)


def settle(timeout: float | None = None) -> bool:
    """Wait until the dropped loaders' closes queued so far have finished; False on timeout."""
    return _CLOSER.settle(timeout)
