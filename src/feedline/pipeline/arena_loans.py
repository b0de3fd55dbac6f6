"""Arena slots lent to the consumer's batches (process workers, ``device="cpu"``).

On CPU a batch *is* its slot's memory (:mod:`feedline.pipeline.slots`). With process
workers the rows are already in a shared-memory arena slot, so instead of copying
them into a pool slot (a 24 MiB memcpy per batch of four 6 MiB ``.npy`` arrays, the
parent's whole CPU cost), the batch's tensors are views of the arena slot, and the
slot goes back to the workers once the user has dropped every tensor of that batch
(:meth:`Loans.lend`).

A loop may keep its batches, so lending is bounded: at most ``count - keep_free``
slots are lent at once (``keep_free``: the workers), and a result that finds them all
lent is copied out as before. The slots not lent are freed when their result is
taken, so the workers always have one to fill: no loop can stall them for good.

A slot comes back from wherever the last tensor died, even inside another thread's
garbage collection while the pool's lock is held, and without running Python code
there: the loan's anchor is registered with a
:class:`~feedline.pipeline._death_queue.DeathQueue` (a C-level weakref callback, as the
slot pool's loans are). Python code run as a batch dies (a ``weakref.finalize`` callback,
before) is where a Ctrl-C that arrived just then is raised, printed as "Exception
ignored" and lost (2 of 2,000 SIGINTs into a loop over process workers). The queue's
thread (``feedline-loans``, registered with the fork gate; signals are only ever handled
in the main thread) gives each slot back and wakes the reader thread through a pipe
(:meth:`Loans.fileno`, waited on with the workers' connections).
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING

from feedline.pipeline._death_queue import DeathQueue

if TYPE_CHECKING:  # torch is imported by the parent only (workers import this module too)
    import numpy as np
    import torch

    from feedline.pipeline.collate import Path


class Loans:
    """Which arena slots are lent, and those that came back (see the module)."""

    def __init__(self, count: int, keep_free: int) -> None:
        self.cap = max(0, count - keep_free)
        self.lent: set[int] = set()
        self._back: deque[int] = deque()
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        self._lock = threading.Lock()
        self._open = True
        self._deaths: DeathQueue[int] = DeathQueue(self.give_back, name="feedline-loans",
                                                   failed="giving back a lent arena slot")

    def take(self, slot: int) -> bool:
        """Lend ``slot`` if the cap allows (the caller holds the pool's lock)."""
        if len(self.lent) >= self.cap or slot in self.lent:
            return False
        self.lent.add(slot)
        return True

    def lend(self, slot: int, arrays: Mapping[Path, np.ndarray]) -> dict[Path, torch.Tensor]:
        """Tensors over ``arrays`` (arena slot ``slot``, taken with :meth:`take`); the slot
        comes back once every one of them (views included) has been freed."""
        from feedline.pipeline.slots import anchored_tensors

        tensors, anchor = anchored_tensors(arrays)
        self._deaths.register(anchor, slot)  # no Python code runs as the batch dies
        return tensors

    def give_back(self, slot: int) -> None:
        """The batch over ``slot`` is gone: queue it and wake the reader. Never blocks; a
        wake-up missed (the lock busy, the pipe full) is caught by the reader's poll."""
        self._back.append(slot)
        if self._lock.acquire(blocking=False):
            try:
                if self._open:
                    os.write(self._w, b"\0")
            except OSError:  # full: a wake-up is pending anyway
                pass
            finally:
                self._lock.release()

    def fileno(self) -> int:
        """Readable when a slot came back (``multiprocessing.connection.wait`` takes it)."""
        return self._r

    def returned(self) -> list[int]:
        """The slots that came back since the last call, no longer lent (the caller holds
        the pool's lock)."""
        try:
            while self._open and os.read(self._r, 4096):
                pass
        except OSError:  # BlockingIOError: drained
            pass
        back = []
        while self._back:
            slot = self._back.popleft()
            self.lent.discard(slot)
            back.append(slot)
        return back

    def close(self) -> None:
        """Stop the collecting thread and close the pipe; batches still lent keep their
        memory (the arena's mapping lives as long as any view of it) and come back to no one."""
        self._deaths.close()
        with self._lock:
            if self._open:
                self._open = False
                os.close(self._r)
                os.close(self._w)
