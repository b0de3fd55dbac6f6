"""Process workers: for Python-heavy transforms that hold the GIL.

Workers are started once (``spawn`` or ``forkserver`` context, never fork)
and persist across epochs. Each receives small job messages over its own pipe,
prepares the batch (read, decode, transform) and writes the dense leaves
straight into a slot of a shared-memory arena (:mod:`feedline.pipeline.shm`;
JPEG fields are decoded into it directly, see ``jobs.direct_fields``);
only keys, ragged leaves and timings travel back pickled. A reader thread in
the parent completes each job's future through ``on_result`` (which copies the
slot out or into pinned memory) and watches every worker's sentinel: a worker
that dies fails its jobs with :class:`feedline.errors.WorkerDied` naming the
worker and the signal.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import signal
import threading
import traceback
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

from feedline.errors import WorkerDied, WorkerError
from feedline.pipeline import collate, shm
from feedline.pipeline.jobs import Context, Job, Record, direct_fields, prepare, read_into_slot

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
    keys: list[str] = field(default_factory=list)
    ragged: dict[Any, list[Any]] = field(default_factory=dict)
    skipped: list[dict[str, str]] = field(default_factory=list)
    timings: list[tuple[str, float, float, dict[str, Any]]] = field(default_factory=list)
    error: dict[str, Any] | None = None
    custom: Any = None


def _error_payload(exc: BaseException) -> dict[str, Any]:
    import pickle

    if isinstance(exc, WorkerError):
        cause = exc.__cause__
        payload = {"message": exc.message, "fix": exc.fix, "place": exc.place,
                   "exc_type": getattr(exc, "exc_type", None),
                   "traceback_text": getattr(exc, "traceback_text", None)}
    else:
        cause = exc
        payload = {"message": f"{type(exc).__name__}: {exc}", "fix": None, "place": {},
                   "exc_type": type(exc).__name__,
                   "traceback_text": "".join(traceback.format_exception(exc))}
    try:
        payload["cause"] = pickle.dumps(cause)
    except Exception:  # an unpicklable exception still travels as text
        payload["cause"] = None
    return payload


def rebuild_error(payload: dict[str, Any]) -> WorkerError:
    """The consumer-side WorkerError for an error sent by a process worker."""
    import pickle

    err = WorkerError(payload["message"], fix=payload["fix"], **payload["place"])
    err.__dict__.update(exc_type=payload["exc_type"], traceback_text=payload["traceback_text"])
    if payload["cause"] is not None:
        err.__cause__ = pickle.loads(payload["cause"])
    return err


def _recorder(timings: list[tuple[str, float, float, dict[str, Any]]]) -> Record:
    def record(stage: str, t0: float, t1: float, attrs: dict[str, Any]) -> None:
        timings.append((stage, t0, t1, attrs))

    return record


def _worker_main(conn: Connection, ctx: Context, spec: shm.ArenaSpec, name: str,
                 custom_collate: Callable[[list[Any]], Any] | None, timed: bool) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
    arena = shm.Arena(spec)
    conn.send(("ready", name))
    while True:
        msg = conn.recv()
        if msg is None:
            break
        job, slot = msg
        conn.send(_run(ctx, job, name, slot, arena.slot(slot), custom_collate, timed))
    gc.collect()  # a failed sample's traceback cycle may still hold views of the arena
    arena.close()


def _run(ctx: Context, job: Job, name: str, slot: int, views: dict[collate.Path, Any],
         custom_collate: Callable[[list[Any]], Any] | None, timed: bool) -> Result:
    """One job in a worker: prepare the batch and fill arena slot ``slot`` (``views``)."""
    res = Result(job, name, slot)
    try:
        record = _recorder(res.timings) if timed else None
        if custom_collate is not None:
            prep = prepare(ctx, job, name, record)
            res.custom = custom_collate(prep.samples)
        else:
            assert ctx.layout is not None
            prep = read_into_slot(ctx, job, name, record, views) or prepare(
                ctx, job, name, record, direct_fields(ctx, views))
            res.ragged = {} if prep.filled else collate.fill(ctx.layout, views, prep.samples)
        res.keys, res.skipped = prep.keys, prep.skipped
    except Exception as exc:
        res.error = _error_payload(exc)
    return res


class ProcessWorkers:
    """A persistent pool of worker processes writing into a shared-memory arena.

    Args:
        count: number of processes.
        ctx: the job context (pickled once per worker).
        spec: the arena (one slot per batch in flight).
        on_result: called in the reader thread with each Result and the arena;
            its return value (or exception) completes the job's future.
        start_method: ``"spawn"`` or ``"forkserver"``.
    """

    kind = "process"

    def __init__(self, count: int, ctx: Context, spec: shm.ArenaSpec,
                 on_result: Callable[[Result, shm.Arena], Any], *, start_method: str = "spawn",
                 custom_collate: Callable[[list[Any]], Any] | None = None,
                 timed: bool = False) -> None:
        if start_method not in ("spawn", "forkserver"):
            raise ValueError(f'start_method must be "spawn" or "forkserver", got {start_method!r}')
        mpctx: Any = mp.get_context(start_method)
        self._on_result = on_result
        self._cond = threading.Condition()
        self._free = list(range(spec.count))
        self._pending: dict[int, tuple[str, Future[Any]]] = {}  # slot -> (worker, future)
        self._dead: WorkerDied | None = None
        self._closed = False
        self._procs: dict[str, Any] = {}
        self._conns: dict[str, Connection] = {}
        self._load: dict[str, int] = {}
        try:
            self.arena = shm.Arena(spec)
            for i in range(count):
                name = f"feedline-process_{i}"
                parent, child = mpctx.Pipe()
                proc = mpctx.Process(target=_worker_main, name=name, daemon=True,
                                     args=(child, ctx, spec, name, custom_collate, timed))
                proc.start()
                child.close()
                self._procs[name], self._conns[name], self._load[name] = proc, parent, 0
            self._wait_ready()
        finally:
            os.unlink(spec.path)  # every worker has it mapped (or start failed)
        self._reader = threading.Thread(target=self._read_loop, name="feedline-results",
                                        daemon=True)
        self._reader.start()

    def _wait_ready(self) -> None:
        waiting = dict(self._conns)
        sentinels = {p.sentinel: n for n, p in self._procs.items()}
        while waiting:
            ready = wait([*waiting.values(), *sentinels], timeout=START_TIMEOUT_S)
            if not ready:
                self.close()
                raise WorkerDied("process workers did not start in time", stage="start",
                                 fix='use worker_type="thread" or check the dataset pickles')
            for obj in ready:
                if obj in sentinels:
                    name = sentinels[obj]
                    if name in waiting:
                        err = self._death(name)
                        self.close()
                        raise err
                    continue
                try:
                    _, name = conns_obj(obj).recv()
                except EOFError:  # the worker died during start-up
                    name = next(n for n, c in self._conns.items() if c is obj)
                    self._procs[name].join(timeout=10)
                    err = self._death(name)
                    self.close()
                    raise err from None
                del waiting[name]

    def _death(self, name: str) -> WorkerDied:
        self._procs[name].join(timeout=5)  # the sentinel fired: reap it to read the code
        code = self._procs[name].exitcode
        if code is not None and code < 0:
            sig = signal.Signals(-code).name
            return WorkerDied(f"process worker killed by {sig}", worker=name, signal=sig,
                              fix="check dmesg for the OOM killer; lower workers or batch_size")
        return WorkerDied(f"process worker exited with code {code}", worker=name,
                          exitcode=code, fix="see the worker's stderr above")

    def submit(self, job: Job) -> Future[Any]:
        """Send ``job`` to the least-loaded worker; waits for a free arena slot."""
        fut: Future[Any] = Future()
        with self._cond:
            while not self._free and not self._closed and self._dead is None:
                self._cond.wait()
            if self._dead is not None or self._closed:
                fut.set_exception(self._dead or WorkerDied("process workers closed"))
                return fut
            slot = self._free.pop()
            name = min(self._load, key=lambda n: self._load[n])
            self._load[name] += 1
            self._pending[slot] = (name, fut)
            fut.set_running_or_notify_cancel()
        try:
            self._conns[name].send((job, slot))
        except (OSError, ValueError):  # the pipe broke: the reader reports the death
            pass
        return fut

    def _read_loop(self) -> None:
        sentinels = {p.sentinel: n for n, p in self._procs.items()}
        conns: dict[Any, str] = {c: n for n, c in self._conns.items()}
        while not self._closed:
            ready = wait([*conns, *sentinels], timeout=0.5)
            for obj in ready:
                if obj in conns:
                    try:
                        res = conns_obj(obj).recv()
                    except (EOFError, OSError):
                        continue  # the sentinel reports why
                    self._complete(res)
                elif obj in sentinels and not self._closed:
                    self._fail_all(self._death(sentinels[obj]))
                    return

    def _complete(self, res: Result) -> None:
        with self._cond:
            name, fut = self._pending.pop(res.slot)
            self._load[name] -= 1
        try:
            if res.error is not None:
                raise rebuild_error(res.error)
            value = self._on_result(res, self.arena)
        except BaseException as exc:
            fut.set_exception(exc)
        else:
            fut.set_result(value)
        finally:
            with self._cond:
                self._free.append(res.slot)
                self._cond.notify_all()

    def _fail_all(self, err: WorkerDied) -> None:
        with self._cond:
            self._dead = err
            pending, self._pending = self._pending, {}
            self._cond.notify_all()
        for _, fut in pending.values():
            if not fut.done():
                fut.set_exception(err)

    def close(self) -> None:
        """Stop every worker (a stuck one gets TERM, then KILL), join the reader, unmap."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        for conn in self._conns.values():
            try:
                conn.send(None)
            except (OSError, ValueError):
                continue  # already gone
        for proc in self._procs.values():
            proc.join(timeout=2)
            if proc.is_alive():  # stuck in user code: TERM, then KILL
                proc.terminate()
                proc.join(timeout=2)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
        if getattr(self, "_reader", None) is not None:
            self._reader.join(timeout=5)
        for conn in self._conns.values():
            conn.close()
        for proc in self._procs.values():
            proc.close()
        self._fail_all(WorkerDied("process workers closed", stage="close"))
        if hasattr(self, "arena"):
            self.arena.close()
