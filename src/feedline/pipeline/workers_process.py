"""Process workers: for Python-heavy transforms that hold the GIL.

Workers are started once (``forkserver``, ``spawn``, or ``fork`` where
:mod:`feedline.pipeline.forking` finds it safe) and persist across epochs. They start before the layout is known: the first
job, the *probe* (batch 0 of the plan), runs in a worker like any other, so a
decode that crashes, exits or hangs in it is a ``WorkerDied`` or
``LoaderTimeout`` in the training process, never its death; the probe's rows
travel back pickled, and the parent then creates the shared-memory arena
(:mod:`feedline.pipeline.shm`) and sends every worker the arena and the batch
plan (:mod:`feedline.pipeline.plan`), once. Each later job message is small;
the worker fills the batch into an arena slot following the plan, and only
keys, ragged leaves and timings travel back pickled (a value that does not
pickle is a ``WorkerError`` naming its key and field). A reader thread in
the parent completes each job's future through ``on_result`` (which copies the
slot out or into pinned memory) and watches every worker's sentinel: a worker
that dies fails its jobs with :class:`feedline.errors.WorkerDied` naming the
worker and the signal.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import itertools
import multiprocessing as mp
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

from feedline import spans
from feedline.children import KEPT_STAGES, SinceLast
from feedline.errors import ConfigError, ResourceError, WorkerDied, WorkerError
from feedline.pipeline import (
    _by_reference,
    _deferred_signals,
    collate,
    forking,
    inherited_locks,
    jobs,
    result_buffers,
    shm,
)
from feedline.pipeline.arena_loans import Loans
from feedline.pipeline.forkserver import (
    forkserver_died,
    packages_of,
    preload_forkserver,
    server_gone,
)
from feedline.pipeline.handoff import Handoff
from feedline.pipeline.jobs import USER_RAISES, Context, Job, Record, exc_text, prepare, run_collate
from feedline.pipeline.main_script import GUARD_FIX, main_from_stream, refuse_while_bootstrapping
from feedline.pipeline.plan import BatchPlan, fill, probe_batch
from feedline.placement import Placement

START_TIMEOUT_S = 120.0


def conns_obj(obj: Any) -> Connection:
    """``wait`` returns connections and sentinels alike; this names the former."""
    conn: Connection = obj
    return conn


@dataclass
class Result:
    """What a worker sends back for one job (dense data stays in the arena)."""

    job: Job
    worker: str
    slot: int
    """The arena slot holding the dense rows; ``-1`` for custom batches."""
    jid: int = -1
    """Which submission this answers (set by the worker loop)."""
    keys: list[str] = field(default_factory=list)
    ragged: dict[Any, list[Any]] = field(default_factory=dict)
    skipped: list[dict[str, str]] = field(default_factory=list)
    timings: list[tuple[str, float, float, dict[str, Any]]] = field(default_factory=list)
    error: dict[str, Any] | None = None
    custom: Any = None


def _error_payload(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, WorkerError):
        cause = exc.__cause__
        payload = {"message": exc.message, "fix": exc.fix, "place": exc.place,
                   "exc_type": getattr(exc, "exc_type", None),
                   "traceback_text": getattr(exc, "traceback_text", None)}
    else:
        cause = exc
        payload = {"message": f"{type(exc).__name__}: {exc_text(exc)}", "fix": None, "place": {},
                   "exc_type": type(exc).__name__,
                   "traceback_text": "".join(traceback.format_exception(exc))}
        if forking.CUDA_IN_FORK in exc_text(exc):
            payload["fix"] = forking.CUDA_IN_FORK_FIX
    if cause is not None and cause.__traceback__ is not None and hasattr(cause, "add_note"):
        # its traceback does not pickle: the lines from the user's frame on travel as a note
        cause.add_note("".join(traceback.format_tb(cause.__traceback__)).rstrip())
    try:
        data = pickle.dumps(cause)
        pickle.loads(data)  # one whose __init__ takes other arguments than its args fails here
        payload["cause"] = data
    except Exception:  # an unpicklable exception still travels as text
        payload["cause"] = None
    return payload



def rebuild_error(payload: dict[str, Any]) -> WorkerError:
    """The consumer-side WorkerError for an error sent by a process worker."""
    err = WorkerError(payload["message"], fix=payload["fix"], **payload["place"])
    err.__dict__.update(exc_type=payload["exc_type"], traceback_text=payload["traceback_text"])
    if payload["cause"] is not None:
        err.__cause__ = pickle.loads(payload["cause"])
    return err


def _recorder(timings: list[tuple[str, float, float, dict[str, Any]]], kids: SinceLast) -> Record:
    """Records a job's stage spans; a read, decode or transform span carries the CPU the
    worker's own live children used since the last one (``child_cpu``: a decoder process
    the user's ``decode`` keeps, whose work the worker's thread CPU calls blocked time)."""
    def record(stage: str, t0: float, t1: float, attrs: dict[str, Any]) -> None:
        if stage in KEPT_STAGES and "cpu" in attrs:
            cpu = kids()
            if cpu > 0:
                attrs = attrs | {"child_cpu": cpu}
        timings.append((stage, t0, t1, attrs))

    return record


class _Worker:
    """The loop of one worker process: jobs in, results out, the plan once."""

    def __init__(self, conn: Connection, ctx: Context, name: str, batch_size: int,
                 custom_collate: Callable[[list[Any]], Any] | None, timed: bool) -> None:
        self.conn, self.ctx, self.name, self.batch_size = conn, ctx, name, batch_size
        self.custom_collate, self.timed = custom_collate, timed
        self.arena: shm.Arena | None = None
        self.plan: BatchPlan | None = None
        self.segments = result_buffers.Segments.usable()
        self.kids: SinceLast | None = None

    def serve(self) -> None:
        self.conn.send(("ready", self.name))
        while True:
            msg = self.conn.recv()
            if msg is None:
                break
            if msg[0] == "free":  # the parent copied these result segments out
                if self.segments is not None:
                    self.segments.free(msg[1])
                continue
            if msg[0] == "plan":
                self._take_plan(msg)
                continue
            if msg[0] == "abort":  # a probe the parent gave up after its plan came: done already
                continue
            _, job, slot, jid, timed = msg
            _send(self.conn, self._run(job, slot, jid, timed or self.timed), self.segments)
        gc.collect()  # a failed sample's traceback cycle may still hold views of the arena
        if self.arena is not None:
            self.arena.close()
        if self.segments is not None:
            self.segments.close()

    def _take_plan(self, msg: tuple[Any, ...]) -> int:
        """The layout is known: map the arena, keep the plan; the slot the probe fills."""
        _, spec, self.plan, probe_slot = msg
        try:
            self.arena = shm.Arena(spec)
        except FileNotFoundError:  # its fd is gone: the training process closed the loader
            raise EOFError("the arena was closed before this worker mapped it") from None
        if self.plan is not None and not self.plan.per_sample:
            self.ctx.source.release_buffers()  # rows read or decoded directly from now on
        self.conn.send(("mapped", self.name))
        return int(probe_slot)

    def _probe_slot(self, res: Result, layout: collate.Layout) -> dict[collate.Path, Any]:
        """Send the layout the probe decided; fill the arena slot the parent gives back."""
        self.conn.send(("layout", res.jid, layout))
        msg = self.conn.recv()
        while msg[0] == "free" and self.segments is not None:  # an earlier result's segments
            self.segments.free(msg[1])
            msg = self.conn.recv()
        if msg[0] != "plan":  # the parent could not make the arena: it holds the error
            raise WorkerDied("the probe was aborted by the training process", stage="start")
        res.slot = self._take_plan(msg)
        assert self.arena is not None
        return self.arena.slot(res.slot)

    def _run(self, job: Job, slot: int, jid: int, timed: bool) -> Result:
        """One job: the probe (it decides the layout), a custom collate, or a batch filled
        into arena slot ``slot`` following the plan; ``timed``: record its stage spans."""
        ctx, name = self.ctx, self.name
        res = Result(job, name, slot, jid)
        try:
            if timed and self.kids is None:
                self.kids = SinceLast()
            record = _recorder(res.timings, self.kids) if self.kids is not None and timed else None
            if self.custom_collate is not None:
                prep = prepare(ctx, ctx.sample_stages(), job, name, record)
                res.custom = run_collate(self.custom_collate, prep, name)
                res.keys, res.skipped = prep.keys, prep.skipped
                return res
            if job.probe:
                _, filled = probe_batch(ctx, job, name, record, self.batch_size,
                                        lambda layout: self._probe_slot(res, layout))
            else:
                assert self.plan is not None and self.arena is not None
                filled = fill(ctx, self.plan, job, name, record, self.arena.slot(slot))
            res.keys, res.skipped, res.ragged = filled.keys, filled.skipped, filled.ragged
        except USER_RAISES as exc:
            res.error = _error_payload(exc)
        return res


FORK_GATE_S = 2.0
"""Most seconds a fork waits for another loader's result thread to finish what it is doing
(it waits on the pinned budget while the loop holds every batch); then the forkserver."""


def _worker_main(conn: Connection, ctx: Context, name: str, batch_size: int,
                 custom_collate: Callable[[list[Any]], Any] | None, timed: bool,
                 placement: Placement | None = None, forked: bool = False,
                 stack_fd: int | None = None) -> None:
    """A worker's life; ``ctx`` was sent wrapped in :class:`_by_reference.ByReference`
    (memory-mapped arrays in the dataset arrive as file references, not copies), or, with
    ``forked``, inherited as it is (:func:`forking.after_fork_in_child` resets first);
    ``stack_fd``: where it writes its stack when asked (:mod:`.inherited_locks`)."""
    if forked:
        forking.after_fork_in_child()
    if stack_fd is not None:
        inherited_locks.arm(stack_fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
    jobs.IN_WORKER_PROCESS = True
    _die_with_parent()
    _one_intra_op_thread()
    if placement is not None:
        placement.apply()  # this process's CPUs: the target GPU's NUMA node
    try:
        _Worker(conn, ctx, name, batch_size, custom_collate, timed).serve()
    except (EOFError, BrokenPipeError, ConnectionResetError):
        pass  # the training process is gone (killed): nobody wants the batch, exit quietly


def _one_intra_op_thread() -> None:
    """torch ops in a worker (a transform's matmul or resize) run on one thread, as in torch
    DataLoader's workers: N workers x the cores' worth of intra-op threads would oversubscribe
    the host, and a forked worker entering an OpenMP region of the pool the parent had
    started hangs for ever (libgomp's threads are not forked with it)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


def _die_with_parent() -> None:
    """Linux: SIGKILL this worker when the process that started it dies (the training
    process with ``spawn`` or ``fork``, the forkserver, which ends with it, otherwise), so a worker
    stuck in a hung transform does not outlive a killed training run."""
    parent = os.getppid()
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return  # not Linux: the closed pipe still ends the worker at its next message
    if os.getppid() != parent:  # it died before the request took effect
        os._exit(0)


def _send(conn: Connection, res: Result, segments: result_buffers.Segments | None = None) -> None:
    """Send ``res``; one that does not pickle becomes an error naming the key and field.

    Pickled by :func:`_by_reference.dumps`: small tensors by value (torch's reducer took a
    shared-memory descriptor per tensor: a collate returning 24,000 small tensors killed
    the worker with "Too many open files"), conjugate and negative views as their values,
    buffers of a MiB or more through the worker's reused ``segments``
    (:mod:`.result_buffers`)."""
    try:
        conn.send_bytes(_by_reference.dumps(res, memmaps=False, segments=segments))
    except (pickle.PicklingError, TypeError, AttributeError, ValueError) as exc:
        err = WorkerError(f"the batch cannot be sent to the training process: {exc}",
                          worker=res.worker, stage="send", **_unpicklable(res),
                          fix="return numbers, strings, bytes or numpy arrays from decode= "
                          "and transform= (process workers pickle what is not a dense array)")
        conn.send(Result(res.job, res.worker, res.slot, jid=res.jid, error=_error_payload(err)))


def _unpicklable(res: Result) -> dict[str, str]:
    """The place (key, field) of the first value of ``res`` that does not pickle."""
    for path, values in res.ragged.items():
        for k, value in enumerate(values):
            try:
                pickle.dumps(value)
            except Exception:
                return {"key": res.keys[k], "field": "/".join(map(str, path))}
    return {"field": "collate= result"} if res.custom is not None else {}


def _out_of_descriptors(exc: OSError, started: int, count: int) -> BaseException:
    """The error for an ``OSError`` while starting worker ``started`` (0-based) of ``count``:
    out of file descriptors (each process worker holds a few in the training process:
    its pipe, its sentinel) or out of processes (``fork`` fails with EAGAIN at the user's
    ``RLIMIT_NPROC``) is a ``ResourceError`` with the fix; anything else is raised as is."""
    import resource

    if exc.errno == errno.EAGAIN:
        from feedline.pipeline.workers_thread import nproc_limit

        return ResourceError(
            f"cannot start process worker {started + 1} of {count}: {exc.strerror} ({nproc_limit()})",
            field="workers", fix="lower workers=, or raise the process limit (ulimit -u)")
    if exc.errno not in (errno.EMFILE, errno.ENFILE):
        return exc
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return ResourceError(
        f"cannot start process worker {started + 1} of {count}: {exc.strerror} (ulimit -n is {soft})",
        field="workers", fix="raise the open-file limit (ulimit -n), or lower workers=")


_fork_hooked = False


def _hook_fork() -> None:
    """Once per process: a child forked from it (``os.fork``, not our start methods) drops
    our workers from multiprocessing's list of its children.

    Without this the child's interpreter exit (``multiprocessing``'s atexit hook)
    terminates every daemon process in that list: the parent's workers, which then
    die of SIGTERM under a training loop that did nothing wrong.
    """
    global _fork_hooked
    if not _fork_hooked:
        os.register_at_fork(after_in_child=_forget_workers)
        _fork_hooked = True


def _forget_workers() -> None:
    children: set[Any] = getattr(mp.process, "_children", set())
    for proc in list(children):
        if str(getattr(proc, "name", "")).startswith("feedline-process_"):
            children.discard(proc)


START_METHODS = ("forkserver", "spawn", "fork")


class ProcessWorkers:
    """A persistent pool of worker processes writing into a shared-memory arena.

    The workers start before the layout is known: the first job (the probe, batch 0)
    sends the layout its samples decided and waits; :meth:`configure` then maps the
    arena in every worker, and the probe fills slot 0. Jobs that need an arena slot
    wait in a queue (``submit`` never blocks).

    Args:
        count: number of processes.
        ctx: the job context (pickled once per worker).
        on_result: called in the reader thread with each Result and its arena slot's
            dense rows; its return value (or exception) completes the job's future.
        on_layout: called in the reader thread with the layout the probe decided; it
            calls :meth:`configure` (or raises, failing the probe's job).
        batch_size: rows per batch (for the probe's arrays).
        start_method: ``"forkserver"`` (see :func:`feedline.pipeline.forkserver.preload_forkserver`), ``"spawn"``, or
            ``"fork"``: used when :func:`forking.refusal` allows it, else the forkserver;
            :attr:`start_method` is the one used, :attr:`start_why` why fork was not.
        configured: the arena and plan when they are known before the workers start
            (``worker_type="auto"`` moving to processes): no probe will run.
    """

    kind = "process"

    def __init__(self, count: int, ctx: Context,
                 on_result: Callable[[Result, Mapping[Any, Any]], Any],
                 on_layout: Callable[[collate.Layout], Any], batch_size: int, *,
                 start_method: str = "forkserver",
                 custom_collate: Callable[[list[Any]], Any] | None = None,
                 timed: bool = False,
                 configured: tuple[shm.ArenaSpec, BatchPlan] | None = None,
                 placement: Placement | None = None) -> None:
        if start_method not in START_METHODS:
            raise ValueError(f"start_method must be one of {START_METHODS}, got {start_method!r}")
        refuse_while_bootstrapping("starts process workers")
        if mp.current_process().daemon:  # before: AssertionError "daemonic processes are not allowed to have children"
            raise ConfigError(f"cannot start process workers inside {mp.current_process().name!r}, a daemonic process "
                              "(another Loader's process worker, a multiprocessing Pool worker): it may not have "
                              "children", field="worker_type",
                              fix='give the Loader made there worker_type="thread"')
        began = time.perf_counter()
        self.start_asked = start_method
        self.start_why: str | None = None
        """Why ``"fork"`` was asked for and not used (``None`` otherwise)."""
        # fork: feedline's own threads (another loader's result reader) stay out of their
        # work until every worker is forked
        gate = contextlib.ExitStack()
        if start_method == "fork":
            self.start_why = forking.refusal(ctx)
            if self.start_why is None and not gate.enter_context(forking.GATE.stopped(FORK_GATE_S)):
                self.start_why = (f"another loader's result thread was still busy after "
                                  f"{FORK_GATE_S:g} s (its loop holds every batch of the budget)")
            elif self.start_why is None:  # again, with feedline's threads held
                self.start_why = forking.refusal(ctx)
            if self.start_why is not None:
                gate.close()
                start_method = "forkserver"
        self.start_method = start_method
        """The start method used."""
        self.start_s = 0.0
        """Seconds from the constructor's start until every worker was ready."""
        forked = start_method == "fork"
        streamed = None if forked else main_from_stream()
        if streamed:  # before: each worker died at start, and the fix said to add a guard
            raise ConfigError(streamed, field="worker_type",
                              fix='save the script to a file and run that, or use worker_type="thread"')
        mpctx: Any = mp.get_context(start_method)
        if start_method == "forkserver":
            preload_forkserver(mpctx, packages_of(ctx.source.dataset, ctx.transform,
                                                  custom_collate, *ctx.stages))
        _hook_fork()
        self._on_result, self._on_layout = on_result, on_layout
        self._probe_errors: dict[int, BaseException] = {}
        self._lock = threading.RLock()  # entered with `with` (C): see feedline.pipeline._deferred_signals
        self._cond = threading.Condition(self._lock)
        self._free: list[int] = []
        self._queued: deque[tuple[Job, Future[Any]]] = deque()  # waiting for an arena slot
        self._pending: dict[int, tuple[str, Future[Any]]] = {}  # job id -> (worker, future)
        self._ids = itertools.count()
        self._dead: WorkerDied | None = None
        self._closed = False
        self._procs: dict[str, Any] = {}
        self._conns: dict[str, Connection] = {}
        self._load: dict[str, int] = {}
        self._stacks: dict[str, int] = {}  # forked worker -> read end of its stack pipe
        self._stuck: WorkerError | None = None
        self.arena: shm.Arena | None = None
        self.loans: Loans | None = None
        """Arena slots lent to batches on CPU (:meth:`lend`); made with the arena."""
        self._slotless = custom_collate is not None  # custom batches travel pickled
        try:
            for i in range(count):
                name = f"feedline-process_{i}"
                try:
                    parent, child = mpctx.Pipe()
                except OSError as exc:
                    raise _out_of_descriptors(exc, i, count) from exc
                sent = ctx if forked else _by_reference.ByReference(ctx)  # fork: inherited
                stack_w = self._stack_pipe(name) if forked else None
                proc = mpctx.Process(target=_worker_main, name=name, daemon=True,
                                     args=(child, sent, name, batch_size, custom_collate, timed,
                                           placement, forked, stack_w))
                try:
                    # a Ctrl-C during the fork (in an at-fork callback) is delivered after it, not lost
                    with _deferred_signals.holding_signals() if forked else contextlib.nullcontext():
                        proc.start()
                except (pickle.PicklingError, TypeError, AttributeError) as exc:
                    parent.close()
                    raise _start_pickling_error(ctx, custom_collate, exc, self.start_why) from exc
                except (ConnectionError, EOFError) as exc:  # before OSError: a subclass
                    parent.close()
                    raise server_gone(exc, start_method) from exc
                except OSError as exc:
                    parent.close()
                    raise _out_of_descriptors(exc, i, count) from exc
                finally:
                    child.close()
                    if stack_w is not None:
                        os.close(stack_w)
                self._procs[name], self._conns[name], self._load[name] = proc, parent, 0
            gate.close()
            self._wait_for("ready")
            self.start_s = time.perf_counter() - began
        except BaseException:
            gate.close()
            if configured is not None:  # configure() would have released it
                shm.release(configured[0])
            self.close()
            raise
        try:
            if configured is not None:  # before the reader thread reads these pipes
                self.configure(*configured, probe=False)
        except BaseException:
            self.close()
            raise
        self._reader = threading.Thread(target=self._read_loop, name="feedline-results",
                                        daemon=True)
        forking.GATE.register(self._reader)  # it works inside GATE.working(): a fork waits
        self._reader.start()

    def _stack_pipe(self, name: str) -> int:
        """A pipe forked worker ``name`` writes its stack into when asked; its write end."""
        try:
            r, w = os.pipe()
        except OSError as exc:
            raise _out_of_descriptors(exc, len(self._procs), len(self._procs) + 1) from exc
        self._stacks[name] = r
        return w

    def stuck(self) -> WorkerError | None:
        """The error for a forked worker with a job that waits for ever on a lock it
        inherited held (:mod:`.inherited_locks`), or ``None``; the consumer asks while a
        batch is late."""
        if self._stuck is not None or not self._stacks:
            return self._stuck
        with self._lock:
            busy = [n for n, load in self._load.items() if load > 0 and n in self._stacks]
        for name in busy:
            pid = self._procs[name].pid
            if pid is not None and inherited_locks.blocked_for_good(pid):
                stack = inherited_locks.stack_of(pid, self._stacks[name])
                self._stuck = inherited_locks.stuck_error(name, stack)
                return self._stuck
        return None

    def report(self) -> dict[str, Any]:
        """What ``loader.stats["processes"]`` shows: how the workers were started."""
        return {"start_method": self.start_method, "asked": self.start_asked,
                "why_not_fork": self.start_why, "start_s": round(self.start_s, 4)}

    def configure(self, spec: shm.ArenaSpec, plan: BatchPlan, *, probe: bool = True) -> None:
        """Map the arena ``spec`` in every worker and give them ``plan`` (once, called by
        ``on_layout`` in the reader thread while the probe waits for it: it fills slot 0);
        then queued jobs start. ``probe=False`` (from the constructor, ``configured=``): no
        probe is waiting, every slot is free.

        Raises:
            WorkerDied: a worker died or did not answer in time.
        """
        try:
            self.arena = shm.Arena(spec)
            for conn in self._conns.values():  # slot 0 is the probe's
                conn.send(("plan", spec, plan, 0))
            self._wait_for("mapped")
        finally:
            shm.release(spec)  # every worker has it mapped (or one failed)
        with self._lock:
            self._free = list(range(1 if probe else 0, spec.count))
            self.loans = Loans(spec.count, len(self._procs))
        self._dispatch()

    def lend(self, slot: int, views: Mapping[Any, Any]) -> dict[Any, Any] | None:
        """Tensors over arena slot ``slot`` (its ``views``), which stays out of use after its
        result is taken until they are gone (see :mod:`.arena_loans`); ``None`` when the
        loans are at their cap (then copy it out)."""
        with self._lock:
            if self.loans is None or self._closed or not self.loans.take(slot):
                return None
            loans = self.loans
        return loans.lend(slot, views)

    def _reap_loans(self) -> None:
        """Slots whose batches are gone are free again; send the jobs waiting for one."""
        with self._lock:
            if self.loans is None or self._closed:
                return
            back = self.loans.returned()
            self._free.extend(back)
        if back:
            self._dispatch()

    def _wait_for(self, what: str) -> None:
        """Wait until every worker has sent ``(what, name)``; a death or silence raises."""
        waiting = dict(self._conns)
        sentinels = {p.sentinel: n for n, p in self._procs.items()}
        while waiting:
            ready = wait([*waiting.values(), *sentinels], timeout=START_TIMEOUT_S)
            if not ready:
                raise WorkerDied(f"process workers did not answer {what!r} in time",
                                 stage="start",
                                 fix='use worker_type="thread" or check the dataset pickles')
            for obj in ready:
                if obj in sentinels:
                    name = sentinels[obj]
                    if name in waiting:
                        raise self._death(name, starting=what == "ready")
                    continue
                try:
                    _, name = conns_obj(obj).recv()
                except EOFError:  # the worker died during start-up
                    name = next(n for n, c in self._conns.items() if c is obj)
                    self._procs[name].join(timeout=10)
                    raise self._death(name, starting=what == "ready") from None
                del waiting[name]

    def _death(self, name: str, *, starting: bool = False) -> WorkerDied:
        self._procs[name].join(timeout=5)  # the sentinel fired: reap it to read the code
        code = self._procs[name].exitcode
        if code is not None and code < 0:
            sig = signal.Signals(-code).name
            return WorkerDied(f"process worker killed by {sig}", worker=name, signal=sig,
                              fix="check dmesg for the OOM killer; lower workers or batch_size")
        if code == 255 and forkserver_died(wait=1.0):  # multiprocessing's code
            return WorkerDied(  # for a worker whose forkserver vanished
                "the forkserver that started the process workers died, and its workers with "
                "it (killed: the OOM killer picks it, as it holds torch)", worker=name,
                exitcode=code, stage="forkserver",
                fix="check dmesg for the OOM killer; lower workers or batch_size (the next "
                    "Loader starts a new forkserver)")
        fix = "see the worker's stderr above"
        if starting:
            fix += f"; a worker that dies while starting usually means: {GUARD_FIX}"
            if self.start_why is not None:
                fix += f' (start_method="fork" was not used: {self.start_why})'
        return WorkerDied(f"process worker exited with code {code}", worker=name,
                          exitcode=code, fix=fix)

    def submit(self, job: Job) -> Future[Any]:
        """Queue ``job`` for the least-loaded worker (sent when an arena slot is free; the
        probe and custom-collate jobs need none). Never blocks."""
        fut: Future[Any] = Handoff()  # the consumer waits on it without a Python-level lock
        with self._lock:
            if self._dead is not None or self._closed:
                fut.set_exception(self._dead or WorkerDied("process workers closed"))
                return fut
            self._queued.append((job, fut))
        self._reap_loans()
        self._dispatch()
        return fut

    def _dispatch(self) -> None:
        """Send queued jobs while arena slots (or slotless jobs) allow, in order."""
        while True:
            with self._lock:
                if not self._queued or self._closed or self._dead is not None:
                    return
                job, fut = self._queued[0]
                slotless = job.probe or self._slotless
                if not slotless and not self._free:
                    return
                self._queued.popleft()
                if not fut.set_running_or_notify_cancel():
                    continue  # cancelled while queued
                slot = -1 if slotless else self._free.pop()
                jid = next(self._ids)
                name = min(self._load, key=lambda n: self._load[n])
                self._load[name] += 1
                self._pending[jid] = (name, fut)
            try:
                # timed when a span sink listens now (a measurement may start after the
                # workers did: diagnose arms a rank at its first batch)
                self._conns[name].send(("job", job, slot, jid, spans.active()))
            except (OSError, ValueError):  # the pipe broke: the reader reports the death
                pass

    def _read_loop(self) -> None:
        sentinels = {p.sentinel: n for n, p in self._procs.items()}
        conns: dict[Any, str] = {c: n for n, c in self._conns.items()}
        while not self._closed:
            loans = [self.loans.fileno()] if self.loans is not None else []
            ready = wait([*conns, *sentinels, *loans], timeout=0.5)
            with forking.GATE.working():  # blocked in wait() above, it holds no lock
                self._reap_loans()
                if self._handle(ready, conns, sentinels):
                    return

    def _handle(self, ready: list[Any], conns: dict[Any, str], sentinels: dict[Any, str]) -> bool:
        """Take the results and deaths ``wait`` reported; True: a worker died (all failed)."""
        for obj in ready:
            if obj in conns:
                reader = result_buffers.Reader()
                try:
                    data = conns_obj(obj).recv_bytes()
                except (EOFError, OSError):
                    continue  # the sentinel reports why
                try:
                    res = _by_reference.loads(data, reader)
                except OSError as exc:  # a result segment the worker holds could not be opened
                    if not self._procs[conns[obj]].is_alive():
                        continue  # it died meanwhile: the sentinel reports why
                    self._fail_all(WorkerDied(
                        f"cannot read a batch from process worker {conns[obj]}'s shared memory: {exc}",
                        worker=conns[obj], stage="send", fix='use worker_type="thread"'))
                    return True
                freed = reader.take_freed()
                if freed:
                    try:
                        conns_obj(obj).send(("free", freed))
                    except (OSError, ValueError):
                        pass  # the worker is gone: the sentinel reports it
                if isinstance(res, tuple):  # ("layout", jid, layout) from the probe
                    self._layout(conns_obj(obj), res[1], res[2])
                else:
                    self._complete(res)
            elif obj in sentinels and not self._closed:
                self._fail_all(self._death(sentinels[obj]))
                return True
        return False

    def _layout(self, conn: Connection, jid: int, layout: collate.Layout) -> None:
        """The probe decided the layout: configure (through ``on_layout``), or abort it
        with the error (a too small /dev/shm, a batch over the budget) kept for its job."""
        try:
            self._on_layout(layout)
        except BaseException as exc:
            self._probe_errors[jid] = exc
            try:
                conn.send(("abort",))
            except (OSError, ValueError):
                pass

    def _complete(self, res: Result) -> None:
        with self._lock:
            name, fut = self._pending.pop(res.jid)
            self._load[name] -= 1
        try:
            if res.jid in self._probe_errors:
                raise self._probe_errors.pop(res.jid)
            if res.error is not None:
                raise rebuild_error(res.error)
            views = self.arena.slot(res.slot) if res.slot >= 0 and self.arena else {}
            value = self._on_result(res, views)
        except BaseException as exc:
            # the failed frames hold views of the arena (as the future keeps the error,
            # the arena could not be unmapped at close): drop their locals
            traceback.clear_frames(exc.__traceback__)
            fut.set_exception(exc)
        else:
            fut.set_result(value)
        finally:
            views = {}
            if res.slot >= 0:
                with self._lock:
                    if self.loans is None or res.slot not in self.loans.lent:
                        self._free.append(res.slot)
            self._dispatch()

    def _fail_all(self, err: WorkerDied) -> None:
        with self._lock:
            self._dead = err
            pending, self._pending = self._pending, {}
            queued, self._queued = self._queued, deque()
            self._cond.notify_all()
        for fut in [f for _, f in pending.values()] + [f for _, f in queued]:
            if not fut.done():
                fut.set_exception(err)

    def close(self) -> None:
        """Stop every worker (a stuck one gets TERM, then KILL), join the reader, unmap."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        for conn in self._conns.values():
            try:
                conn.send(None)
            except (OSError, ValueError):
                continue  # already gone
        stuck = self._stuck.worker if self._stuck is not None else None
        waited = [p for n, p in self._procs.items() if n != stuck]  # stuck for good: no use waiting
        left = _join_all(waited, 2.0) + [p for n, p in self._procs.items() if n == stuck]
        for proc in left:  # stuck in user code: TERM, then KILL
            proc.terminate()
        for proc in _join_all(left, 2.0):
            proc.kill()
        _join_all(left, 5.0)
        reader = getattr(self, "_reader", None)
        if reader is not None and reader is not threading.current_thread():
            reader.join(timeout=5)
        if self.loans is not None:
            self.loans.close()
        for conn in self._conns.values():
            conn.close()
        for fd in self._stacks.values():
            os.close(fd)
        self._stacks.clear()
        for proc in self._procs.values():
            try:
                proc.close()
            except ValueError:  # exited, but its status was taken (SIGCHLD ignored or reaped
                continue        # by a handler of the script since the start): nothing to free
        self._fail_all(WorkerDied("process workers closed", stage="close"))
        if self.arena is not None:
            self.arena.close()


def _join_all(procs: list[Any], timeout: float) -> list[Any]:
    """Join ``procs`` within one deadline of ``timeout`` seconds for all of them (before, 2 s
    each: the last of eight stuck workers got its TERM after 16 s); those still alive."""
    deadline = time.monotonic() + timeout
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
    return [proc for proc in procs if proc.is_alive()]


def _start_pickling_error(ctx: Context, custom_collate: Any, exc: BaseException,
                          why_not_fork: str | None = None) -> ConfigError:
    """Starting a process worker pickles the job context: name the argument that does not
    (and, where ``start_method="fork"`` was asked for, why it was not used: a forked worker
    would have inherited it unpickled)."""
    parts = {"transform=": ctx.transform, "collate=": custom_collate, "stages=": ctx.stages,
             "decode=": ctx.decoders, "the dataset": ctx.source}
    name = "an argument"
    for candidate, value in parts.items():
        try:
            pickle.dumps(value)
        except Exception:  # any failure names the culprit
            name = candidate
            break
    refused = f' (start_method="fork" was not used: {why_not_fork})' if why_not_fork else ""
    return ConfigError(
        f"process workers cannot receive {name}: it does not pickle ({exc}){refused}",
        fix="define functions at module level (not lambdas or closures) and keep locks, open files "
            'and sockets out of them, or use worker_type="thread"',
    )
