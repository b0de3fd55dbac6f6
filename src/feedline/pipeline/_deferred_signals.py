"""Run a blocking clean-up from a finalizer without losing the signals that arrive meanwhile.

A loader still alive at interpreter exit is closed by an ``atexit`` hook
(:mod:`._dropped`; one dropped before is closed on a thread of its own), which
waits for the workers to stop. Python runs signal handlers in the main thread between bytecodes, so a
Ctrl-C (``KeyboardInterrupt``) or a ``SIGTERM`` handler that calls
``sys.exit`` (a cluster's pre-emption notice) fires *inside* the finalizer,
where the exception is printed as "Exception ignored in" and dropped: the
training went on as if the signal had never come.

:func:`deferring_signals` runs the clean-up with a handler of its own in place
for each signal that has a Python handler. The first such signal stops the
clean-up where it is, as the signal itself used to (the user pressed Ctrl-C to
stop now, not after a stuck worker's timeouts); the handlers are restored and
the signals that came are sent to the main thread again once the finalizer has
returned (a real signal, so a ``sleep`` or a wait in the main thread ends as it
would have). A signal whose disposition is the default (``SIGTERM`` kills) or
ignored is left alone.

:func:`holding_signals` is the same promise for a step that must not be cut short
either: forking a worker. ``os.fork`` runs the at-fork callbacks of the
process (``logging`` releases its lock there) in Python; a Ctrl-C that arrived
during the fork was raised inside one of them, printed as "Exception ignored in"
and dropped (the training went on, and ``logging``'s lock could stay held). While
it is held, a signal is only noted; it is delivered once the block has ended.

The same hazard sits in ``with condition:`` on the training thread:
``threading.Condition.__enter__`` is Python code, so a Ctrl-C raised in it just after it
took the lock leaves the lock held (the ``with`` block never started), and the next batch
waits for ever. The conditions the training thread enters (process workers, slot pool,
fork gate) are made over a lock of their own, and ``with`` takes that C lock.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

DEFERRED = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2")
                 if hasattr(signal, n))
REDELIVER_AFTER_S = 0.05  # the finalizer has returned by then; raised inside it, it would be lost again


class _Stop(BaseException):
    """Raised by the stand-in handler to end the clean-up early (never leaves this module)."""


def deferring_signals(fn: Callable[[], Any]) -> None:
    """Call ``fn()``; Python-handled signals that arrive meanwhile end it and are delivered after.

    Off the main thread (where no handler runs anyway) or where the platform
    cannot send a signal to one thread, ``fn`` simply runs.
    """
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_kill"):
        fn()
        return
    got: list[int] = []
    running = [False]  # _Stop only ends fn: raised while the handlers are restored, it would lose the signal

    def stand_in(signum: int, _frame: Any) -> None:
        got.append(signum)
        if running[0]:
            running[0] = False  # once
            raise _Stop

    saved: dict[int, Any] = {}
    try:
        for sig in DEFERRED:
            if callable(signal.getsignal(sig)):
                saved[sig] = signal.signal(sig, stand_in)
        running[0] = True
        try:
            fn()
        finally:
            running[0] = False
    except _Stop:
        pass  # the clean-up stops where it was, as it did for the signal itself; the signal follows
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        if got:
            try:
                threading.Thread(target=_redeliver, args=(threading.main_thread().ident, list(dict.fromkeys(got))),
                                 name="feedline-redeliver-signals", daemon=True).start()
            except RuntimeError:  # the interpreter is exiting (an atexit finalizer): it ends anyway
                pass


@contextlib.contextmanager
def holding_signals() -> Iterator[None]:
    """Run the block to its end; Python-handled signals that arrive meanwhile are delivered after it.

    The handlers are restored and each signal that came is sent again to the main
    thread as the block ends, so its handler (``KeyboardInterrupt``, a ``sys.exit``)
    runs in the code that follows, where its exception is not swallowed. Off the
    main thread the block simply runs.
    """
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_kill"):
        yield
        return
    got: list[int] = []

    def note(signum: int, _frame: Any) -> None:
        got.append(signum)

    saved: dict[int, Any] = {}
    try:
        for sig in DEFERRED:
            if callable(signal.getsignal(sig)):
                saved[sig] = signal.signal(sig, note)
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(got):
            signal.pthread_kill(threading.get_ident(), sig)  # the handler runs at the next bytecode


def _redeliver(main: int, signals: list[int]) -> None:
    time.sleep(REDELIVER_AFTER_S)
    for sig in signals:
        signal.pthread_kill(main, sig)
