"""Open shard files, at most a budget of them at once.

A shard's handle (a file descriptor for the local backends) is opened on first use
and kept for the reads that follow, so a read costs no ``open`` and no identity check.
A dataset of thousands of shards must not keep one descriptor per shard, though: the
open-file limit (``ulimit -n``) is 1,024 by default on most Linux systems and 64 in
some containers, and a loader that has read every shard once would hold them all and
fail with ``EMFILE`` in the middle of an epoch. So a dataset keeps at most
:func:`default_budget` handles open (a quarter of the soft limit, at most 1,024):
opening one more closes the least recently used handle that no read is using.
A shard reopened later is checked again against the file the dataset opened
(:meth:`ShardReadState.lease`), so a replacement in between is still found.

When the process runs out of descriptors anyway (other code holds them), an open
that fails with ``EMFILE`` closes every idle handle of the dataset and tries once
more before raising :class:`~feedline.errors.ResourceError`.
"""

from __future__ import annotations

import itertools
import os
import resource
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from feedline.errors import ReadError, ResourceError
from feedline.io._catalog import ShardEntry, file_stamp

MAX_BUDGET = 1024  # handles one dataset keeps open at most, whatever the limit


def default_budget() -> int:
    """Handles a dataset keeps open: a quarter of the soft open-file limit, 4 to 1,024."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return MAX_BUDGET
    return max(4, min(MAX_BUDGET, soft // 4))


class HandleBudget:
    """The shards of one dataset whose handles are open, closed least recently used first.

    Thread-safe. Its lock is never held while waiting for a shard's lock (victims are
    taken with a non-blocking acquire), so two threads opening shards cannot deadlock.
    """

    def __init__(self, reader: Any, limit: int | None = None) -> None:
        self.reader = reader
        self.limit = default_budget() if limit is None else max(1, int(limit))
        self._open: set[ShardReadState] = set()
        self._opening = 0  # opens under way (each holds a place in the budget)
        self._lock = threading.Lock()
        self._clock = itertools.count()

    def tick(self) -> int:
        """A number larger than every earlier one (the recency of a use)."""
        return next(self._clock)

    def __len__(self) -> int:
        return len(self._open)

    def reserve(self) -> bool:
        """Take a place for one open; whether the budget is full with it (make room
        first). Threads opening shards at once each count, so together they stay within
        the budget. Every reserve is followed by :meth:`admit` or :meth:`release`."""
        with self._lock:
            self._opening += 1
            return len(self._open) + self._opening > self.limit

    def release(self) -> None:
        """Give back a place taken by :meth:`reserve` whose open failed."""
        with self._lock:
            self._opening -= 1

    def admit(self, state: ShardReadState) -> None:
        """Record ``state``'s handle as open (its place from :meth:`reserve`)."""
        with self._lock:
            self._opening -= 1
            self._open.add(state)

    def forget(self, state: ShardReadState) -> None:
        """Record ``state``'s handle as closed."""
        with self._lock:
            self._open.discard(state)

    def make_room(self, keep: ShardReadState, everything: bool = False) -> int:
        """Close idle handles, least recently used first, until an eighth of the budget
        is free (so the sort is paid once per eighth of the budget's opens, not per
        open), or every idle one with ``everything``; returns how many were closed."""
        with self._lock:
            others = sorted((s for s in self._open if s is not keep), key=lambda s: s.last_use)
            opening = self._opening
        excess = len(others) if everything else len(others) + opening - self.limit + self.limit // 8
        closed = 0
        for victim in others:
            if closed >= excess:
                break
            if victim.close_if_idle():
                closed += 1
        return closed


class ShardReadState:
    """Per-shard reading state: the lazily opened backend handle, shared by threads."""

    def __init__(self, entry: ShardEntry, budget: HandleBudget) -> None:
        self.entry = entry
        self.budget = budget
        self.last_use = 0
        self._handle: Any = None
        self._users = 0
        self._lock = threading.Lock()

    @contextmanager
    def lease(self) -> Iterator[Any]:
        """The open handle for this shard, not closed by the budget until the block ends.

        Raises:
            ReadError: the shard cannot be opened, or another file now has its name.
            ResourceError: the process has no file descriptor left, even after closing
                every idle handle of this dataset.
        """
        handle = self.hold()
        try:
            yield handle
        finally:
            self.unhold()

    def hold(self) -> Any:
        """:meth:`lease` without the context manager (a hot loop's): the open handle, kept
        open until the matching :meth:`unhold`. Raises as :meth:`lease` does."""
        with self._lock:
            if self._handle is None:
                self._handle = self._open()
            self._users += 1
            handle = self._handle
        self.last_use = self.budget.tick()
        return handle

    def unhold(self) -> None:
        """End a :meth:`hold`."""
        with self._lock:
            self._users -= 1

    def _open(self) -> Any:
        """Open the shard (under ``self._lock``), making room in the budget first."""
        budget = self.budget
        if budget.reserve():
            budget.make_room(self)
        try:
            try:
                opened = budget.reader.open(self.entry.path)
            except ResourceError:
                if not budget.make_room(self, everything=True):
                    raise
                opened = budget.reader.open(self.entry.path)
            try:
                self._check_stamp(opened)
            except BaseException:
                budget.reader.close(opened)
                raise
        except BaseException:
            budget.release()
            raise
        budget.admit(self)
        return opened

    def _check_stamp(self, handle: Any) -> None:
        """The file opened is the one the dataset was opened with (not replaced since).

        A file changed in place keeps its identity: a cut is found by the read (naming
        the first sample lost), changed bytes by ``verify=True`` or ``feedline verify``.

        Raises:
            ReadError: another file now has the shard's name.
        """
        want = self.entry.stamp
        if want is None:
            return
        fd = handle if isinstance(handle, int) else getattr(handle, "fd", None)
        st = os.fstat(fd) if isinstance(fd, int) else os.stat(self.entry.path)
        if file_stamp(st) != want:
            raise ReadError(
                "the shard was replaced by another file after the dataset was opened (a "
                "repack, rsync or mv): its index may no longer describe it",
                shard=self.entry.name, path=self.entry.path,
                fix="reopen the dataset (a new Loader) once the copy is complete, and run "
                    "`feedline verify` on it")

    def close_if_idle(self) -> bool:
        """Close the handle unless a read holds it (or another thread holds the state)."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if self._users or self._handle is None:
                return False
            self._close()
            return True
        finally:
            self._lock.release()

    def close(self) -> None:
        """Close the handle if it was opened."""
        with self._lock:
            if self._handle is not None:
                self._close()

    def _close(self) -> None:
        handle, self._handle = self._handle, None
        self.budget.forget(self)
        self.budget.reader.close(handle)
