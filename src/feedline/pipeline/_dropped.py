"""Close loaders dropped without ``close()``, with no Python code run where they die.

A loader dropped without ``close()`` (``loader = Loader(...)`` again every epoch, a
``break`` out of a notebook cell) must still stop its workers. A ``weakref.finalize`` did
it, in the thread that dropped the last reference: the training loop's own. Python checks
for signals when a function starts, and the loader's teardown runs in C (freeing the
iterator, its batches, the sampler) just before, so a Ctrl-C that arrived meanwhile was
raised at the finalizer's first line, printed as "Exception ignored in: <finalize object>"
and lost (8 of 200 Ctrl-Cs into a loop that makes and drops a loader per pass; the
deferral of :mod:`._deferred_signals` starts a line too late to catch it).

Here the loader is registered with a :class:`~feedline.pipeline._death_queue.DeathQueue`
(its weakref's callback is ``SimpleQueue.put``, C): the loop goes on at once, its signals
reach it, and the queue's thread (``feedline-closer``, registered with the fork gate,
signals never run there) closes the runtime. :func:`settle` waits for the
closes queued so far; a new ``Loader`` calls it first, so the loader made in place of a
dropped one starts after that one's workers have stopped, as before. At interpreter exit
the loaders still alive are closed in the main thread (as ``weakref.finalize`` did), and
a close in progress is waited for a short while (its workers die with the process).
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Callable

from feedline.pipeline._death_queue import DeathQueue

EXIT_WAIT_S = 2.0
"""Most seconds interpreter exit waits for a dropped loader's close in progress."""


def _close(close: Callable[[], None]) -> None:
    close()


class _Closer:
    def __init__(self) -> None:
        # the thread starts with the first loader watched (nothing at import)
        self.deaths: DeathQueue[Callable[[], None]] = DeathQueue(
            _close, name="feedline-closer", failed="closing a dropped feedline Loader", start=False)
        self.exit_hook = False

    def watch(self, owner: object, close: Callable[[], None]) -> int:
        if not self.exit_hook:
            self.exit_hook = True
            atexit.register(self.at_exit)
        return self.deaths.register(owner, close)

    def at_exit(self) -> None:
        from feedline.pipeline._deferred_signals import deferring_signals

        for close in self.deaths.forget_all():
            deferring_signals(close)
        self.deaths.settle(EXIT_WAIT_S)


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
    return _CLOSER.deaths.forget(token)


def settle(timeout: float | None = None) -> bool:
    """Wait until the dropped loaders' closes queued so far have finished; False on timeout."""
    return _CLOSER.deaths.settle(timeout)
