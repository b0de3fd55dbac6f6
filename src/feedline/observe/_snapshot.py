"""A running session's raw measurements as JSON, and a session rebuilt from them.

``feedline diagnose`` keeps a partial result while the command runs, in case
it is killed before it can write its report. Building a report there (the
analysis, percentiles, findings) costs tens of milliseconds of the training
process's CPU and GIL, and grows with the run: measured on a loaded 2-core
host, a partial report taken at step 16 stretched the waits of the next steps
by 5-18 ms each and turned a compute-bound scenario "balanced". So the
training process only copies what its clocks and recorder appended
(:func:`snapshot`: lists of numbers, a few milliseconds even at thousands of
steps), and the ``diagnose`` process, which has nothing else to do, rebuilds a
session from it (:func:`restore`) and builds the report only when it needs it.

Device events cannot cross processes: a snapshot carries the device times
already resolved and host times for the rest, as a partial report would.
"""

from __future__ import annotations

import time
from typing import Any

from feedline.observe._clock import LoaderClock
from feedline.observe._session import Session
from feedline.observe._stats import Span
from feedline.observe._torch_hooks import CopyRecord

VERSION = 2
_PER_STEP = ("starts", "waits", "runq", "q_at")
_PLAIN = (str, int, float, bool)
"""Span attributes a snapshot keeps (a copy's CUDA events, or any object a user's span
carries, cannot cross processes)."""


def snapshot(session: Session) -> dict[str, Any]:
    """The raw measurements of ``session`` so far (JSON-able; no analysis)."""
    clocks = []
    for key, c in list(session.clocks.clocks.items()):
        n = min(len(c.starts), len(c.waits), len(c.runq), len(c.q_at))  # a step being appended: not yet
        row: dict[str, Any] = {name: list(getattr(c, name))[:n] for name in _PER_STEP}
        gpu = c.timer.snapshot() if c.timer is not None else None
        row.update(key=key, label=c.label, config=c.config, order=c.order, gaps=list(c.gaps),
                   pass_starts=list(c.pass_starts), pass_ends=list(c.pass_ends),
                   tids=sorted(c.tids), done=sorted(c.done.items()), inner=c.inner, grad=c.grad, trained=c.trained,
                   batch_samples=c.batch_samples, batch_bytes=c.batch_bytes, gpu=gpu)
        clocks.append(row)
    stage, start, end, pids, tids, attrs = session.recorder.columns()
    # columns, not a tuple per span: no object the garbage collector tracks is made per span
    # (thousands of them, alive while the snapshot is written, brought on full collections
    # in the training process); an attrs dict of plain values is written as it is
    spans = {"stage": stage, "start": start, "end": end, "pid": pids, "tid": tids,
             "attrs": [a if all(isinstance(v, _PLAIN) for v in a.values())
                       else {k: v for k, v in a.items() if isinstance(v, _PLAIN)} for a in attrs]}
    copies = session.copy_log.durations(wait=False)
    return {
        "version": VERSION, "taken": time.perf_counter(), "name": session.name,
        "device": str(session.device), "batch_size": session.batch_size,
        "steps": session.steps, "t0": session._t0, "limit_at": session._limit_at,
        "notes": list(session.notes), "pinned": list(session.pinned), "clocks": clocks,
        "aliases": sorted(session.clocks.aliases.items()),
        "opt_tids": sorted(session.clocks.opt_tids),
        "updates": [[tid, list(ts)] for tid, ts in list(session.clocks.updates.items())],
        "spans": spans,
        "worker_dir": session._worker_dir,
        "copies": [[r.start, r.end, r.nbytes, r.pinned, r.non_blocking, d]
                   for r, d in zip(list(session.copy_log.records), copies, strict=False)],
        "host": {"series": list(session.sampler.series), "gil": list(session.sampler.gil)},
    }


class _Recorded:
    """A device timer whose step times were measured elsewhere."""

    def __init__(self, times: list[float]) -> None:
        self.times = times

    def start(self) -> None:
        return None

    def stop(self, token: Any) -> None:
        return None

    def finish(self) -> list[float]:
        return list(self.times)

    def snapshot(self) -> list[float]:
        return list(self.times)


def restore(data: dict[str, Any]) -> Session:
    """A stopped-in-time :class:`Session` holding ``data`` (from :func:`snapshot`), whose
    :meth:`~Session.partial_report` is the report of the run up to the snapshot.

    Raises:
        ValueError: ``data`` is not a snapshot of this version.
    """
    if data.get("version") != VERSION:
        raise ValueError(f"not a feedline session snapshot of version {VERSION}")
    s = Session(data["name"], data["device"], data["batch_size"], steps=data["steps"])
    s._t0 = data["t0"]
    taken = float(data["taken"])
    limit = data["limit_at"]
    s._limit_at = taken if limit is None else min(float(limit), taken)  # the run's end, as known
    s.notes.extend(data["notes"])
    s.pinned.extend(data["pinned"])
    s._worker_dir = data["worker_dir"]
    for row in data["clocks"]:
        c = LoaderClock(row["label"], row["config"], row["order"])
        for name in (*_PER_STEP, "pass_starts", "pass_ends"):
            setattr(c, name, list(row[name]))
        c.gaps = [(a, b) for a, b in row["gaps"]]
        c.tids = set(row["tids"])
        c.done = {int(k): v for k, v in row["done"]}
        c.inner, c.batch_samples, c.batch_bytes = row["inner"], row["batch_samples"], row["batch_bytes"]
        c.grad, c.trained = bool(row.get("grad", True)), bool(row.get("trained", False))
        c.timer = _Recorded(row["gpu"]) if row["gpu"] is not None else None
        s.clocks.clocks[row["key"]] = c
    s.clocks.aliases = {int(a): int(k) for a, k in data.get("aliases", [])}
    s.clocks.opt_tids = {int(t) for t in data.get("opt_tids", [])}
    s.clocks.updates = {int(tid): [float(t) for t in ts] for tid, ts in data.get("updates", [])}
    cols = data["spans"]
    s.recorder.add(Span.from_list(row) for row in zip(
        cols["stage"], cols["start"], cols["end"], cols["pid"], cols["tid"], cols["attrs"], strict=True))
    for start, end, nbytes, pinned, non_blocking, dur in data["copies"]:
        s.copy_log.add(CopyRecord(start, end, nbytes, pinned, non_blocking, dur))
    s.sampler.series = list(data["host"]["series"])
    s.sampler.gil = [(t, ms) for t, ms in data["host"]["gil"]]
    return s

