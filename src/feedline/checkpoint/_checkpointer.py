"""``Checkpointer``: save returns once the state is staged; one background thread writes.

The training loop is blocked only while the state is copied into the reused
staging buffer (device -> pinned host on a side stream, or host -> host);
checksumming, writing, fsync, the atomic commit and ``keep=K`` rotation run on
the writer thread, which runs at a lower CPU priority (nice + :data:`WRITER_NICE`)
so that, where the cores are contended, the training threads and the data
loader's workers go first; its work is mostly waiting for the disk, and its CPU
time per save is in :attr:`CheckpointStats.last_writer_cpu_s`.
:meth:`Checkpointer.reserve` allocates and touches the staging memory ahead of
the first save, on the writer thread. That blocked time is reported as a ``checkpoint`` span, so
``feedline watch``/``diagnose`` show it as its own stage.
"""

from __future__ import annotations

import contextlib
import numbers
import os
import threading
import time
import warnings
import weakref
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from feedline import spans
from feedline.checkpoint._layout import Layout, header_json, make_layout
from feedline.checkpoint._load import load as _load
from feedline.checkpoint._staging import CopyStreams, StagingArena, stage_into
from feedline.checkpoint._store import (
    commit,
    committed_steps,
    lock_directory,
    new_data_name,
    remove_recycled,
    remove_stale,
    rotate,
    take_recycled,
)
from feedline.checkpoint._writers import IO_CHOICES, WriterChoice, choose_writer, make_writer
from feedline.errors import ArgumentError, ConfigError, WriteError
from feedline.format._atomic import remove_quietly
from feedline.format._files import path_argument
from feedline.units import parse_bytes

IF_BUSY = ("wait", "skip")


class CheckpointWarning(UserWarning):
    """Something about a save the caller should know (a step below the folder's newest)."""

WRITER_NICE = 10  # added to the writer thread's nice value (Linux: per thread)


@dataclass
class CheckpointStats:
    """Counters and the last save's timings (seconds)."""

    saves: int = 0
    skipped: int = 0
    committed: int = 0
    last_blocked_s: float = 0.0
    # CPU time the calling thread spent in the last save(): ~ last_blocked_s when the loop had a core;
    # far below it when other processes held the cores or the save waited for the previous write
    # (if_busy="wait"): the rest of the blocked time was waiting, not staging
    last_blocked_cpu_s: float = 0.0
    last_durable_s: float = 0.0
    last_writer_cpu_s: float = 0.0  # CPU time the writer thread spent on the last save
    blocked_s: list[float] = field(default_factory=list)
    blocked_cpu_s: list[float] = field(default_factory=list)  # last_blocked_cpu_s of every save


class Checkpointer:
    """Save nested states of tensors, arrays and plain values without stopping training.

    Typical use: ``reserve(state)`` once the optimizer state exists (staging
    memory prepared in the background), ``save(step, state)`` every N steps,
    ``wait()`` or ``close()`` at the end.

    Args:
        directory: where checkpoints go (created if missing). One checkpointer
            saves into a directory at a time: the first ``save()`` or
            ``reserve()`` takes its lock (a :class:`ConfigError` in a second
            one, in this process or another) until :meth:`close`.
        pinned_budget: most bytes of staging memory (``"2GiB"`` or an int);
            ``None`` sizes it by the first save. A state larger than the budget
            fails ``save()`` with :class:`~feedline.errors.ResourceError`.
        io: ``"auto"`` (``gds`` for GPU states where GDS is engaged, else
            ``direct`` where the directory takes O_DIRECT, else ``buffered``;
            :attr:`writer_choice` says why), ``"buffered"``, ``"direct"`` or ``"gds"``.
        keep: how many committed checkpoints to keep (``None``: all): the one
            just committed and the ``keep - 1`` highest other steps. Old ones
            are removed only after a new one is committed. Saving a step below
            the folder's newest (training rewound) warns once
            (:class:`CheckpointWarning`): ``latest()`` still returns the newest.
        if_busy: when ``save()`` is called while the previous save is still
            being written: ``"wait"`` for it, or ``"skip"`` this save (counted
            in :attr:`stats`). Either way no checkpoint is ever corrupted.
        durable: fsync data, header and directory (default). ``False`` keeps
            the atomic rename but a power loss may lose the newest checkpoint.

    Raises:
        ConfigError: an invalid argument; ``directory`` is a file.
        WriteError: ``directory`` cannot be created.
    """

    def __init__(self, directory: str | os.PathLike[str], *, pinned_budget: int | str | None = None,
                 io: str = "auto", keep: int | None = None, if_busy: str = "wait", durable: bool = True) -> None:
        if if_busy not in IF_BUSY:
            raise ConfigError(f"if_busy must be one of {IF_BUSY}, got {if_busy!r}", fix="use 'wait' or 'skip'")
        if io not in IO_CHOICES:
            raise ConfigError(f"io must be one of {IO_CHOICES}, got {io!r}", fix="pass io='auto'")
        if keep is not None and (not isinstance(keep, int) or isinstance(keep, bool) or keep < 1):
            raise ConfigError(f"keep must be a positive int or None, got {keep!r}", fix="e.g. keep=3")
        if not isinstance(durable, bool):
            raise ArgumentError(f"durable must be True or False, got {durable!r}", field="durable")
        self.directory = Path(path_argument(directory, "directory"))
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise ConfigError(f"{self.directory} exists and is not a folder", path=str(self.directory),
                              field="directory", fix="pass a folder (it is created if missing)") from None
        except OSError as e:
            raise WriteError(f"cannot create the checkpoint folder: {e.strerror}", path=str(self.directory),
                             fix="pass a folder in a writable place") from e
        self.budget = None if pinned_budget is None else parse_bytes(pinned_budget, name="pinned_budget")
        self.io, self.keep, self.if_busy, self.durable = io, keep, if_busy, durable
        self.writer_choice: WriterChoice | None = None
        self._writer: Any = None
        self._arena: StagingArena | None = None
        self._streams: CopyStreams | None = None  # side streams, one per CUDA device of the state
        self._pending: Future[None] | None = None
        self._error: BaseException | None = None
        self.stats = CheckpointStats()
        self._reserving: Future[Any] | None = None
        self._tid: list[int] = []  # the writer thread's native id, once it runs (no reference to self)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="feedline-checkpoint",
                                        initializer=_lower_priority, initargs=(self._tid,))
        self._lock: list[int] = []  # the directory's writer lock, taken by the first save or reserve
        self._pid = os.getpid()  # a forked child has no writer thread: it must not save through this one
        self._warned_rewind = False
        self._closed = False
        self._mutex = threading.Lock()  # one save()/reserve() stages at a time
        self._inside: set[int] = set()  # threads inside save()/reserve() (a handler may run in one)
        self._finalizer = weakref.finalize(self, _shutdown, self._pool, self._lock)

    # -- the loop side -----------------------------------------------------------------

    def save(self, step: int, state: Any) -> bool:
        """Stage ``state`` for step ``step`` and return; the write continues in the background.

        Returns False when the save was skipped (``if_busy="skip"`` and the
        previous save still writing). After return the caller may change the
        state freely.

        Raises:
            ConfigError: a value in ``state`` cannot be stored without pickle (names it);
                another Checkpointer is saving into the same directory.
            ResourceError: the state is larger than ``pinned_budget``.
            WriteError: the previous save failed in the background (disk full...).

        Thread-safe: saves from several threads run one after another. A save
        from a signal handler that interrupted a save of this checkpointer in
        the same thread is a :class:`ConfigError` (both would stage into the one
        staging buffer: before, both checkpoints were committed with wrong
        tensors and matching checksums).
        """
        self._check_process()
        if not isinstance(step, numbers.Integral) or isinstance(step, (bool, np.bool_)) or step < 0:
            raise ConfigError(f"step must be a non-negative int, got {step!r}", field="step")
        with self._staging("save"):
            self._check_open()
            return self._save(int(step), state)  # a numpy counter is fine; its header holds a plain int

    def _save(self, step: int, state: Any) -> bool:
        t0 = time.perf_counter()
        cpu0 = time.thread_time()
        if self._busy() and self.if_busy == "skip":
            self.stats.skipped += 1
            return False
        self._drain()
        layout = make_layout(state)
        self._setup(layout)
        self._warn_if_rewound(step)
        assert self._arena is not None
        buf = self._arena.buffer(layout.data_bytes)
        stage_into(layout, buf, streams=self._streams)
        t1 = time.perf_counter()
        cpu = time.thread_time() - cpu0
        self.stats.saves += 1
        self.stats.last_blocked_s = t1 - t0
        self.stats.blocked_s.append(t1 - t0)
        self.stats.last_blocked_cpu_s = cpu
        self.stats.blocked_cpu_s.append(cpu)
        spans.emit("checkpoint", t0, t1, step=step, nbytes=layout.data_bytes, cpu_s=round(cpu, 6))
        self._pending = self._pool.submit(self._write, step, layout, buf, t0)
        return True

    def reserve(self, state: Any) -> None:
        """Prepare staging memory for states like ``state`` now, in the background.

        Allocates the staging buffer and touches its pages on the writer
        thread, so the first :meth:`save` does not stop on them (a first save
        of 1 GiB spent 3.5 s on page faults on the 2-core VM measured; pinned
        memory for GPU states is slow to allocate too). Returns at once; a
        ``save()`` meanwhile waits for it. Optional: without it the first save
        allocates.

        Raises:
            ConfigError: a value in ``state`` cannot be stored without pickle.
            ResourceError: the state is larger than ``pinned_budget``.
        """
        self._check_process()
        with self._staging("reserve"):
            self._check_open()
            self._reserve(state)

    def _reserve(self, state: Any) -> None:
        self._drain()
        layout = make_layout(state)
        self._setup(layout)
        assert self._arena is not None
        if self.budget is not None and layout.data_bytes > self.budget:
            self._arena.buffer(layout.data_bytes)  # raises the budget's ResourceError here, not later
        self._reserving = self._pool.submit(self._arena.buffer, layout.data_bytes, prefault=True)

    def wait(self) -> None:
        """Block until the last save is committed (durable); re-raise its error if it failed."""
        self._check_process()
        self._drain()

    def latest(self) -> int | None:
        """The newest committed step in the directory, or None."""
        steps = committed_steps(self.directory)
        return steps[-1] if steps else None

    def steps(self) -> list[int]:
        """Every committed step, oldest first."""
        return committed_steps(self.directory)

    def load(self, step: int | None = None, *, into: Any = None, verify: bool = True, strict: bool = True,
             copy: bool = False) -> Any:
        """Load a committed checkpoint (default: the latest); see :func:`feedline.checkpoint.load`.

        Waits for a save in flight first, so ``save(); load()`` sees that save
        (in a forked child, which has no writer thread, it only reads).
        """
        if os.getpid() == self._pid:
            self._drain()
        return _load(self.directory, step, into=into, verify=verify, strict=strict, copy=copy)

    def close(self) -> None:
        """Finish the save in flight, stop the writer thread and free the staging memory.

        In a forked child it only drops the child's copies: the save in flight,
        the writer thread and the lock belong to the parent.
        """
        if os.getpid() != self._pid:
            self._finalizer.detach()
            self._lock.clear()  # the parent's lock: closing the child's copy of the fd would not release it
            return
        with self._staging("close"):  # a save staging in another thread finishes first
            self._closed = True
            try:
                self._drain()
                if self._lock:  # this checkpointer saved here: the spare data file goes
                    remove_recycled(self.directory)
            finally:
                self._finalizer()
                if self._arena is not None:
                    self._arena.release()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------

    @property
    def writer_tid(self) -> int | None:
        """The writer thread's native thread id (None before the first save or reserve)."""
        return self._tid[0] if self._tid else None

    def _warn_if_rewound(self, step: int) -> None:
        """Once per checkpointer: a save below the folder's newest step (training rewound)."""
        if self._warned_rewind:
            return
        newest = self.latest()
        if newest is not None and step < newest:
            self._warned_rewind = True
            warnings.warn(f"saving step {step} into {self.directory}, which holds step {newest}: latest() "
                          f"and load() still return step {newest} (keep= keeps the new saves). To resume "
                          "from this run later, remove the later steps or save into another folder",
                          CheckpointWarning, stacklevel=3)

    @contextlib.contextmanager
    def _staging(self, what: str) -> Iterator[None]:
        """One save or reserve at a time; a nested one in the same thread (a signal handler) is refused.

        The thread is marked inside before the lock is taken and until it is
        released, so a handler that runs at any point in between sees it.
        """
        me = threading.get_ident()
        if me in self._inside:
            raise ConfigError(f"{what}() was called while this thread is inside save() or reserve() of the "
                              "same Checkpointer (from a signal handler?): both would stage into its one "
                              "buffer", path=str(self.directory),
                              fix="in the handler only set a flag and save from the training loop, which "
                                  "finishes the save it was in first")
        self._inside.add(me)
        try:
            with self._mutex:
                yield
        finally:
            self._inside.discard(me)

    def _check_open(self) -> None:
        if self._closed:  # before: RuntimeError "cannot schedule new futures after shutdown"
            raise ConfigError("this Checkpointer is closed", path=str(self.directory),
                              fix="make a new Checkpointer to save again (load() still works)")

    def _check_process(self) -> None:
        if os.getpid() != self._pid:  # before: save() and wait() in a forked child waited forever
            raise ConfigError(f"this Checkpointer was made by process {self._pid}; process {os.getpid()} is a "
                              "fork of it, where its writer thread does not run", path=str(self.directory),
                              fix="make a Checkpointer in the child, saving into another folder, or fork "
                                  "before making it; load() works in the child")

    def _busy(self) -> bool:
        return self._pending is not None and not self._pending.done()

    def _drain(self) -> None:
        if self._reserving is not None:
            reserving, self._reserving = self._reserving, None
            reserving.result()  # an allocation failure (MemoryError) surfaces here
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()  # _write never raises; errors land in _error
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def _setup(self, layout: Layout) -> None:
        """Pick the writer and staging memory on the first save (they depend on where the state lives).

        The first save also takes the directory's writer lock (held until
        :meth:`close`): a Checkpointer only loading never needs a writable folder.
        """
        if not self._lock:
            self._lock.append(lock_directory(self.directory))
            remove_stale(self.directory)  # a killed save's files: no live writer's (we hold the lock)
        if self._arena is not None:
            return
        on_gpu = "cuda" in layout.devices()
        self.writer_choice = choose_writer(self.io, str(self.directory), on_gpu=on_gpu)
        self._writer = make_writer(self.writer_choice.name)
        if self.writer_choice.name == "gds":
            device = next(str(leaf.device) for leaf in layout.leaves if getattr(leaf, "is_cuda", False))
            self._arena = StagingArena(self.budget, device=device)
        else:
            self._arena = StagingArena(self.budget, pinned=on_gpu)
        if on_gpu:
            self._streams = CopyStreams()

    @property
    def staging_allocations(self) -> int:
        """How many times staging memory was allocated (1 after any number of same-size saves)."""
        return 0 if self._arena is None else self._arena.allocations

    def _note_fallback(self) -> None:
        """``writer_choice`` says ``buffered``, and why, once the folder's file system refused O_DIRECT
        (before: it kept saying ``direct``, "io='direct' requested", while every write went buffered)."""
        refused = getattr(self._writer, "fallback_reason", None)
        choice = self.writer_choice
        if refused and choice is not None and choice.name == "direct":
            self.writer_choice = WriterChoice(choice.requested, "buffered",
                                              f"{choice.reason}; {refused}: buffered writes")

    def _write(self, step: int, layout: Layout, buf: Any, t0: float) -> None:
        cpu0 = time.thread_time()
        try:
            self._write_commit(step, layout, buf, t0)
        finally:
            self.stats.last_writer_cpu_s = time.thread_time() - cpu0

    def _write_commit(self, step: int, layout: Layout, buf: Any, t0: float) -> None:
        name = new_data_name(step)
        path = self.directory / name
        committed = False
        try:
            host = not hasattr(buf, "is_cuda")
            checksums: list[int] = []
            with _hash_stream(buf, self._streams):
                for i, e in enumerate(layout.entries):  # a tensor stored once for two entries is hashed once
                    checksums.append(_checksum(buf, e.offset, e.nbytes, host) if layout.owns(i)
                                     else checksums[layout.first[i]])
            reused = take_recycled(self.directory, name)
            self._writer.write(str(path), buf, layout.data_bytes, overwrite=reused)
            self._note_fallback()
            commit(self.directory, step, header_json(layout, checksums, step=step, data_name=name),
                   durable=self.durable)
            committed = True
            self.stats.committed += 1
            self.stats.last_durable_s = time.perf_counter() - t0
            rotate(self.directory, self.keep, protect=name, step=step, recycle=True)
        except BaseException as e:  # surfaced to the caller at the next save()/wait()
            if not committed:
                remove_quietly(path)  # never a committed checkpoint's data
            if isinstance(e, OSError):
                where = "rotating old checkpoints after" if committed else "committing"
                e = WriteError(f"{where} step {step} failed: {e.strerror or e}", path=str(self.directory),
                               fix="free space on that file system or check its permissions")
            self._error = e


def _shutdown(pool: ThreadPoolExecutor, lock: list[int]) -> None:
    """Stop the writer thread, then release the directory lock (close() or garbage collection)."""
    try:
        pool.shutdown(wait=True)
    finally:
        while lock:
            fd = lock.pop()
            if fd >= 0:
                os.close(fd)


def _lower_priority(tid_box: list[int]) -> None:
    """Writer thread start: note its id and raise its nice value (Linux applies it per thread)."""
    tid = threading.get_native_id()
    tid_box.append(tid)
    if not hasattr(os, "setpriority"):
        return
    try:
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + WRITER_NICE))
    except OSError:
        pass  # a sandbox that forbids it: the writer keeps the loop's priority


def _hash_stream(buf: Any, streams: CopyStreams | None) -> Any:
    """Where the writer thread copies a device staging buffer (gds) to the host to hash it:
    the buffer device's side stream. On the writer thread's current stream (the legacy
    default stream, which the training loop uses too) each copy waited for the kernels the
    loop had queued, and the loop's next kernels waited for it."""
    if streams is None or not hasattr(buf, "is_cuda"):
        return contextlib.nullcontext()
    import torch

    return torch.cuda.stream(streams.on(buf.device))


def _checksum(buf: Any, offset: int, nbytes: int, host: bool) -> int:
    if host:
        return int(xxhash.xxh3_64_intdigest(buf[offset : offset + nbytes]))
    return int(xxhash.xxh3_64_intdigest(buf[offset : offset + nbytes].cpu().numpy()))
