"""The batch slot pool: host buffers allocated once, reused, bounded by a byte budget.

A slot holds one preallocated array per dense leaf of the batch layout, at
full batch size. On CUDA the slots are pinned (page-locked) host memory so the
copy to the device is a DMA; on CPU they are ordinary memory. The pool never
holds more than ``budget`` bytes: producers that need a slot wait for one to
come back. A slot comes back through :meth:`SlotPool.release` with an
optional *fence* (a CUDA event recorded after the copy that reads the slot);
it is handed out again only once the fence has completed.

On CPU the batch *is* the slot (no copy), so a slot is *lent*: the user's
tensors are fresh tensors over the slot's memory, and the memory comes back to
the pool only when the last of them (and of any view of them) is freed. A
batch the user holds is therefore never overwritten, and a loop that drops
its batches reuses the same few slots instead of faulting in new pages for
every batch.

A loop ``for batch in loader`` still holds its previous batch while the next one is
handed out, and the worker that just finished that next one asks for a slot at that
moment. So that this race does not cost one more slot of memory, a pool with a
``soft_cap`` lets a producer that finds no free slot, once ``soft_cap`` slots exist, wait
up to :data:`REUSE_WAIT_S` for a lent one to come back before it allocates another. A wait
that times out raises the cap by one, or doubles it when the previous one timed out less
than :data:`REGROW_S` before (the loop keeps its batches, or batches wait ahead of a slow
loop), so the pool settles at what the loop really holds after a few waits, and a single
late return (a worker that finished a later batch first waits for the one the loop waits
for; a busy host) costs one slot, not as many more as exist.

A lent slot comes back through a C-level weakref callback (its anchor is registered with
a :class:`~feedline.pipeline._death_queue.DeathQueue`), never Python code: Python checks
for signals when a function starts, so a Ctrl-C that arrived as a Python callback
(``weakref.finalize``) started was raised inside it, printed as "Exception ignored in:
<finalize object>" and lost, and the training went on (3 to 4 of 1000 SIGINTs to a loop
dropping batches; 1 of 480 random-point cases of the signals test). Producers that wait
for a lent slot wait on that queue (no thread of its own).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from feedline import spans
from feedline.errors import ConfigError, DecodeError, ResourceError
from feedline.pinned import pinned_empty
from feedline.pipeline._death_queue import DeathQueue
from feedline.pipeline.collate import Layout, Path
from feedline.pipeline.jobs import out_of_memory_fix
from feedline.placement import Placement
from feedline.units import format_bytes


class Fence(Protocol):
    """What a slot waits on before reuse (``torch.cuda.Event`` fits)."""

    def query(self) -> bool: ...

    def synchronize(self) -> None: ...


REUSE_WAIT_S = 0.02
"""Most seconds a producer waits for a lent slot to come back once ``soft_cap`` slots exist."""

RETURN_POLL_S = 0.05
"""Longest a producer with nothing else to wait for sleeps on the return queue before it
looks at the pool again (a ``close()`` wakes one waiter at once, the others within this)."""

REGROW_S = 1.0
"""A reuse wait that times out within this many seconds of the previous one doubles the
soft cap (the loop holds many batches); a lone one raises it by one."""


class _Anchor:
    """Kept alive by every tensor of one lent slot; its weakref's callback returns the slot."""

    __slots__ = ("__weakref__",)


class _Lent(np.ndarray):
    """A view of slot memory that carries the loan's anchor."""

    anchor: _Anchor


class PoolClosed(RuntimeError):
    """The pool was closed while a producer waited for a slot."""


@dataclass(eq=False)
class Slot:
    """One batch worth of host buffers."""

    id: int
    tensors: dict[Path, torch.Tensor]
    arrays: dict[Path, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.arrays:
            self.arrays = {p: t.numpy() for p, t in self.tensors.items()}


class SlotPool:
    """A bounded pool of batch slots.

    Args:
        budget: most bytes the pool may hold (all slots together).
        pin: allocate page-locked memory (needs CUDA) instead of pageable memory.
        allocate: optional ``fn(shape, dtype, pin) -> Tensor`` (tests, shared memory).
        soft_cap: with ``reuse=False``, the slots after which a producer first waits briefly
            for a lent one to come back (see the module); ``None``: never waits for that.

    Slots are allocated lazily, the first time no free one exists and the
    budget allows, so a small run never touches the whole budget.

    With ``reuse=False`` (the CPU engine) a released slot is lent, not recycled:
    its tensors now belong to the user's batch (no copy out), and the budget
    bounds the bytes of batches in flight. Its memory comes back (to be lent
    again) once the user has dropped every tensor of that batch, views included.
    """

    def __init__(
        self,
        budget: int,
        *,
        pin: bool,
        reuse: bool = True,
        allocate: Callable[[tuple[int, ...], torch.dtype, bool], torch.Tensor] | None = None,
        soft_cap: int | None = None,
    ) -> None:
        if budget < 1:
            raise ConfigError(f"pinned_budget must be positive, got {budget}", field="pinned_budget")
        self.budget = budget
        self.pin = pin
        self.reuse = reuse
        self._allocate = allocate or _empty
        self._layout: Layout | None = None
        self._free: deque[Slot] = deque()
        self._pending: deque[tuple[Slot, Fence]] = deque()
        self._lock = threading.RLock()  # entered with `with` (C): see feedline.pipeline._deferred_signals
        self._cond = threading.Condition(self._lock)
        self._count = 0
        self._ids = 0
        self._closed = False
        # lent slots the user dropped, queued from C as their batch dies (see the module)
        self._deaths: DeathQueue[Slot] = DeathQueue()
        self.peak_bytes = 0
        self.budget_waits = 0
        """Times a producer found the budget used up and waited for a slot to come back."""
        self.budget_wait_s = 0.0
        self.soft_cap = soft_cap
        self.reuse_waits = 0
        """Times a producer waited for a lent slot to come back instead of allocating one."""
        self.reuse_wait_s = 0.0
        self._last_timeout = float("-inf")

    @property
    def slot_bytes(self) -> int:
        return self._layout.nbytes if self._layout else 0

    @property
    def slots_created(self) -> int:
        """Slots allocated so far (a reused or returned slot is not counted again)."""
        return self._ids

    @property
    def allocated_bytes(self) -> int:
        """Bytes held by all slots allocated so far (never above ``budget``)."""
        return self._count * self.slot_bytes

    def configure(self, layout: Layout) -> None:
        """Fix the slot layout (once, from the first batch).

        Raises:
            ResourceError: one slot is larger than the whole budget.
        """
        if layout.nbytes > self.budget:
            raise ResourceError(
                f"one batch needs {format_bytes(layout.nbytes)} of slot memory, more than "
                f"pinned_budget={format_bytes(self.budget)}",
                stage="pin", fix="raise pinned_budget or lower batch_size",
            )
        with self._lock:
            self._layout = layout

    def acquire(self) -> Slot:
        """A free slot; waits (for a fence or a release) when the budget is used up.

        Raises:
            PoolClosed: the pool was closed while waiting.
        """
        waited_from: float | None = None
        reuse_until: float | None = None
        try:
            while True:
                with self._lock:
                    if self._closed:
                        raise PoolClosed("slot pool closed")
                    self._reap()
                    if self._free:
                        return self._lend(self._free.popleft())
                    if self.soft_cap is not None and not self.reuse and self._ids >= self.soft_cap:
                        now = time.perf_counter()
                        if reuse_until is None:
                            reuse_until = now + REUSE_WAIT_S
                            self.reuse_waits += 1
                        if now < reuse_until:
                            self._wait(reuse_until - now)
                            self.reuse_wait_s += time.perf_counter() - now
                            continue
                        # the loop holds more batches than that (keeps them, or they wait
                        # ahead of a slow loop): allocate, and wait again only at one more,
                        # or twice as many when this keeps happening
                        again = now - self._last_timeout < REGROW_S
                        self.soft_cap = 2 * self.soft_cap if again else self.soft_cap + 1
                        self._last_timeout = now
                    if (self._count + 1) * self.slot_bytes <= self.budget:
                        self._count += 1
                        self._ids += 1
                        slot_id = self._ids
                        break
                    if waited_from is None:
                        waited_from = time.perf_counter()
                    if not self._pending:
                        self._wait(None)
                        continue
                    fence = self._pending[0][1]
                fence.synchronize()  # host wait in the producer, never in the consumer
        finally:
            if waited_from is not None:
                self._waited(waited_from)
        self.peak_bytes = max(self.peak_bytes, self.allocated_bytes)
        return self._lend(self._new_slot(slot_id))

    def _wait(self, timeout: float | None) -> None:
        """Wait (the condition held) for a release, a fence, a close or, with lent slots,
        a loan coming back; ``None``: until one of them."""
        if self.reuse:
            self._cond.wait(timeout)
            return
        got = None
        self._cond.release()
        try:
            got = self._deaths.get(RETURN_POLL_S if timeout is None else max(timeout, 0.0))
        finally:
            self._cond.acquire()
        if got is not None:
            self._take_back(got)
        elif self._closed:
            self._deaths.wake()  # wake the next waiter too

    def _waited(self, since: float) -> None:
        now = time.perf_counter()
        with self._lock:
            self.budget_waits += 1
            self.budget_wait_s += now - since
        spans.emit("budget_wait", since, now)

    def _lend(self, slot: Slot) -> Slot:
        """``slot`` itself when slots are reused; else a loan of its memory (see the module).

        Each lent tensor wraps a view that holds one shared anchor; the anchor dies, and
        the slot comes back, when the storage of every lent tensor has been freed.
        """
        if self.reuse:
            return slot
        tensors, anchor = anchored_tensors(slot.arrays)
        # the slot comes back wherever the last tensor dies (any thread's garbage
        # collection) without running Python code: no lock of ours, no signal raised there
        self._deaths.register(anchor, slot)
        return Slot(slot.id, tensors, dict(slot.arrays))

    def _take_back(self, slot: Slot) -> None:
        """A lent slot's memory is free again (the condition held)."""
        if not self._closed and (self._count + 1) * self.slot_bytes <= self.budget:
            self._count += 1
            self._free.append(slot)

    def _new_slot(self, slot_id: int) -> Slot:
        assert self._layout is not None
        layout = self._layout
        try:
            tensors = {
                leaf.path: self._allocate(
                    (layout.batch_size, *leaf.shape), _torch_dtype(leaf.dtype, leaf.path), self.pin
                )
                for leaf in layout.dense
                if leaf.shape is not None and leaf.dtype is not None
            }
        except (MemoryError, RuntimeError) as exc:
            if not isinstance(exc, MemoryError) and "allocate" not in str(exc):
                raise
            with self._lock:
                self._count -= 1  # never allocated
            raise ResourceError(
                f"cannot allocate batch slot {slot_id} ({format_bytes(layout.nbytes)}, "
                f"{self._ids - 1} allocated before it): {_first_line(exc)}", stage="collate",
                fix=out_of_memory_fix()) from exc
        return Slot(slot_id, tensors)

    def _reap(self) -> None:
        while self._pending and self._pending[0][1].query():
            self._free.append(self._pending.popleft()[0])
        if not self.reuse:  # lent memory the user let go of
            for slot in self._deaths.take():
                self._take_back(slot)

    def release(self, slot: Slot, fence: Fence | None = None) -> None:
        """Give ``slot`` back; it is reused only after ``fence`` (if any) completes."""
        with self._lock:
            if not self.reuse:
                self._count -= 1  # the user's batch owns the memory now
                self._deaths.wake()  # room to allocate: wake a producer waiting on returns
            elif fence is None:
                self._free.append(slot)
            else:
                self._pending.append((slot, fence))
            self._cond.notify()

    def close(self) -> None:
        """Drop every slot and wake waiting producers (they get :class:`PoolClosed`)."""
        with self._lock:
            self._closed = True
            for _, fence in self._pending:
                fence.synchronize()
            self._free.clear()
            self._pending.clear()
            self._deaths.close()  # their weakrefs die: no callback puts them back
            self._deaths.wake()  # a producer waiting for a returned slot wakes (and wakes the next)
            self._cond.notify_all()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[-1] if text else ''}"


def anchored_tensors(arrays: Mapping[Path, np.ndarray]) -> tuple[dict[Path, torch.Tensor], Any]:
    """Tensors over ``arrays`` (a slot's memory) that hold one shared anchor, and the
    anchor: a weak reference to it dies once the storage of every one of them (views
    included) has been freed."""
    anchor = _Anchor()
    tensors = {}
    for path, array in arrays.items():
        view = array.view(_Lent)
        view.anchor = anchor  # the tensor's storage holds the only reference to the view
        tensors[path] = torch.from_numpy(view)
    return tensors, anchor


def _empty(shape: tuple[int, ...], dtype: torch.dtype, pin: bool) -> torch.Tensor:
    # pinned: exactly the pages asked (torch's pinned allocator would round each slot up to a
    # power of two and keep it locked after the pool drops it; see feedline.pinned)
    return pinned_empty(shape, dtype) if pin else torch.empty(shape, dtype=dtype)


def placed_allocator(
    placement: Placement,
) -> Callable[[tuple[int, ...], torch.dtype, bool], torch.Tensor]:
    """Slot allocation whose pages are first touched by a thread on ``placement``'s CPUs,
    so Linux puts them on that NUMA node (pinned memory is locked where it was touched)."""

    def allocate(shape: tuple[int, ...], dtype: torch.dtype, pin: bool) -> torch.Tensor:
        return placement.first_touch(lambda: _empty(shape, dtype, pin).zero_())

    return allocate


def _torch_dtype(numpy_dtype: str, path: Any = None) -> torch.dtype:
    dt = np.dtype(numpy_dtype)
    if not dt.isnative:
        field = "/".join(map(str, path)) if isinstance(path, tuple) else path
        raise DecodeError(
            f"values of dtype {numpy_dtype} (non-native byte order) cannot be stacked into a "
            "tensor", field=field, stage="collate",
            fix="return native arrays from decode=/transform= (arr.astype(arr.dtype.newbyteorder('=')))")
    return torch.from_numpy(np.empty(0, dtype=dt.newbyteorder("="))).dtype
