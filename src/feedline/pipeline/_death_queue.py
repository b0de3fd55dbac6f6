"""A death queue: act on objects that died without running Python code where they die.

Three things in the loader act on an object's death: a lent slot comes back when the
user drops its batch (:mod:`.slots`, :mod:`.arena_loans`), and a loader dropped without
``close()`` stops its workers (:mod:`._dropped`). A batch dies, and a loader is dropped,
wherever the last reference goes: in the training loop, between two of its bytecodes, or
inside another thread's garbage collection while a lock of ours is held. Python checks
for signals when a function starts, so a Python callback there (``weakref.finalize``,
before) is where a Ctrl-C that had just arrived was raised, printed as "Exception ignored
in: <finalize object>" and lost: the training went on (3 to 4 of 1,000 SIGINTs to a loop
dropping batches, 2 of 2,000 over process workers, 8 of 200 dropping loaders).

:meth:`DeathQueue.register` gives the object a weakref whose callback is the C-level
``SimpleQueue.put`` of that weakref: nothing of ours runs as it dies, no lock is taken,
and the loop goes on at once with its signals. The payload registered with it is then
taken off the queue either by its owner (:meth:`DeathQueue.get`, :meth:`DeathQueue.take`:
the slot pool's producers, which wait for a slot anyway) or by a collector thread of the
queue's own (``handle=``): a daemon thread registered with the fork gate that handles each
payload inside ``GATE.working()`` (so a fork never copies a lock it holds) and on which no
signal handler ever runs (they run in the main thread only). :meth:`DeathQueue.settle`
waits until what was queued so far has been handled; :meth:`DeathQueue.close` stops the
thread, and the weakrefs still registered die with it (their objects come back to no one).
"""

from __future__ import annotations

import queue
import threading
import warnings
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from feedline.pipeline import forking

P = TypeVar("P")


class _Stop:
    """Queued by :meth:`DeathQueue.close`: the collector thread ends."""


class _Settled:
    """Queued by :meth:`DeathQueue.settle`: everything queued before it has been handled."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done: queue.SimpleQueue[bool] = queue.SimpleQueue()


class DeathQueue(Generic[P]):
    """Payloads of registered objects that died, taken off a queue filled from C.

    Args:
        handle: called with each payload on the queue's collector thread (``None``: the
            owner takes them with :meth:`get` / :meth:`take`).
        name: the collector thread's name.
        failed: what a warning says failed when ``handle`` raises.
        start: start the collector thread now; otherwise at the first :meth:`register`.
    """

    def __init__(self, handle: Callable[[P], None] | None = None, *, name: str = "feedline-deaths",
                 failed: str = "handling a death", start: bool = True) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._refs: dict[int, tuple[weakref.ref[Any], P]] = {}
        self._handle, self._name, self._failed = handle, name, failed
        self._lock = threading.Lock()  # `with` on the C lock: see feedline.pipeline._deferred_signals
        self._thread: threading.Thread | None = None
        if handle is not None and start:
            self._start()

    def register(self, obj: object, payload: P) -> int:
        """Queue ``payload`` once ``obj`` has died; a token for :meth:`forget`."""
        if self._handle is not None and self._thread is None:
            self._start()
        ref = weakref.ref(obj, self._queue.put)  # C-level: no Python code runs as ``obj`` dies
        self._refs[id(ref)] = (ref, payload)
        return id(ref)

    def forget(self, token: int) -> bool:
        """Stop watching (an explicit close); False when the object already died (its payload
        is queued or handled) or was forgotten."""
        return self._refs.pop(token, None) is not None

    def forget_all(self) -> list[P]:
        """Stop watching every object still alive; their payloads (each key is popped on its
        own, so one the collector thread takes meanwhile is handled there, not here too)."""
        entries = (self._refs.pop(token, None) for token in list(self._refs))
        return [entry[1] for entry in entries if entry is not None]

    def get(self, timeout: float | None) -> P | None:
        """The payload of an object that died, waiting up to ``timeout`` seconds for one;
        ``None`` on timeout, on :meth:`wake`, or for an object forgotten meanwhile."""
        try:
            return self._claim(self._queue.get(timeout=timeout))
        except queue.Empty:
            return None

    def take(self) -> list[P]:
        """The payloads of the objects that died since the last call (waits for none)."""
        got: list[P] = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return got
            payload = self._claim(item)
            if payload is not None:
                got.append(payload)

    def wake(self) -> None:
        """Wake one waiter of :meth:`get` (it returns ``None``)."""
        self._queue.put(None)

    def settle(self, timeout: float | None = None) -> bool:
        """Wait until the collector thread has handled every payload queued so far; False
        on timeout. The wait is a C-level ``SimpleQueue.get``: a Ctrl-C ends it cleanly."""
        if self._thread is None:
            return True
        mark = _Settled()
        self._queue.put(mark)
        try:
            return mark.done.get(timeout=timeout)
        except queue.Empty:
            return False

    def close(self, timeout: float = 5.0) -> None:
        """Stop the collector thread (waiting up to ``timeout`` seconds for it) and forget
        every object: those still alive come back to no one."""
        thread = self._thread
        if thread is not None:
            self._queue.put(_Stop())
            if thread is not threading.current_thread():
                thread.join(timeout=timeout)
        self._refs.clear()  # their weakrefs die: no callback queues them any more

    def _claim(self, item: Any) -> P | None:
        if not isinstance(item, weakref.ref):
            return None
        entry = self._refs.pop(id(item), None)
        return None if entry is None else entry[1]

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._collect, name=self._name, daemon=True)
            forking.GATE.register(self._thread)  # it works inside GATE.working(): a fork waits
            self._thread.start()

    def _collect(self) -> None:
        assert self._handle is not None
        while True:
            item = self._queue.get()
            if isinstance(item, _Stop):
                return
            if isinstance(item, _Settled):
                item.done.put(True)
                continue
            with forking.GATE.working():
                payload = self._claim(item)
                if payload is None:
                    continue
                try:
                    self._handle(payload)
                except Exception as exc:
                    warnings.warn(f"{self._failed} failed: {type(exc).__name__}: {exc}",
                                  RuntimeWarning, stacklevel=1)
