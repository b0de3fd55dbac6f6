"""worker_type="auto": decided from a GIL probe and measured CPU vs wall time; batches never change."""

from __future__ import annotations

import hashlib
import statistics
import threading
import time
from typing import Any

import pytest
from loader_helpers import Busy, batch_ids

import feedline
from feedline.pipeline import auto
from feedline.pipeline.auto import AutoChoice, GilProbe, GilReading


def _epochs(worker_type: str, epochs: int = 2) -> tuple[list[list[int]], dict[str, Any]]:
    out = []
    with feedline.Loader(Busy(96, work=60_000), batch_size=4, workers=2, seed=4,
                         worker_type=worker_type, drop_last=False) as loader:
        for epoch in range(epochs):
            loader.set_epoch(epoch)
            out += [batch_ids(b) for b in loader]
            assert loader._rt.settle(60)  # a move to processes is complete from here on
        return out, loader.stats


@pytest.mark.timeout(180)
@pytest.mark.parametrize("bound", [100.0, 0.0])  # every measure GIL-bound / none
def test_auto_never_changes_content_or_order(monkeypatch: pytest.MonkeyPatch,
                                             bound: float) -> None:
    want, _ = _epochs("thread")
    monkeypatch.setattr(auto, "GIL_HELD", (-1.0, 2.0))  # the probe never decides: the share does
    monkeypatch.setattr(auto, "GIL_BOUND", bound)
    monkeypatch.setattr(auto, "SHORT_PASS_SECONDS", 0.0)  # 24 short batches: move all the same
    got, stats = _epochs("auto")
    assert got == want
    chosen = "process" if bound else "thread"
    assert stats["auto"]["chosen"] == chosen and stats["worker_type"] == chosen
    assert len(stats["auto"]["cpu_per_wall"]) >= 4 and stats["auto"]["why"]


@pytest.mark.timeout(180)
def test_auto_reports_what_it_measured_and_follows_its_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(auto, "SHORT_PASS_SECONDS", 0.0)
    _, stats = _epochs("auto", epochs=1)
    report = stats["auto"]
    assert report["chosen"] in ("thread", "process") and "CPU-s per second" in report["why"]
    share = statistics.median(report["cpu_per_wall"])  # the rule's own median (was the upper one)
    held, (low, high) = report["gil_held"], auto.GIL_HELD
    if "could not start" in report["why"]:
        return
    if held is not None and abs(held - low) > 1e-3 and abs(held - high) > 1e-3 and not low < held < high:
        assert report["chosen"] == ("process" if held >= high else "thread") and "probe" in report["why"], report
        return
    if abs(share - auto.GIL_BOUND) < 1e-3:
        return  # the report rounds each ratio to 3 decimals: at the threshold either side is right
    assert (report["chosen"] == "process") == (share < auto.GIL_BOUND), report


def test_the_rule() -> None:
    gil = AutoChoice(workers=2, cores=2)
    assert gil.measure == 4
    gil.timed(True, cpu=0.9, wall=1.0)
    for _ in range(3):
        assert gil.timed(False, cpu=0.45, wall=1.0) is None
    assert gil.timed(False, cpu=0.45, wall=1.0) == "process"
    assert "wait for the GIL" in gil.why
    free = AutoChoice(workers=2, cores=2)
    free.timed(True, cpu=0.9, wall=1.0)
    assert [free.timed(False, cpu=0.85, wall=1.0) for _ in range(4)][-1] == "thread"
    one = AutoChoice(workers=1, cores=8)
    assert one.timed(False, cpu=0.2, wall=1.0) == "thread" and "one worker" in one.why


def test_the_probe_reading_decides_clear_cases_and_leaves_the_middle_to_the_share() -> None:
    def decide(held: int, cpu: float, runq: float = 0.0, workers: int = 2) -> AutoChoice:
        choice = AutoChoice(workers=workers, cores=2)
        choice.reading = GilReading(wakes=100, elapsed=1.0, waited=held / 100)
        choice.timed(True, cpu=0.9, wall=1.0)
        for _ in range(choice.measure):
            choice.timed(False, cpu=cpu, wall=1.0, runq=runq)
        return choice

    assert decide(90, cpu=0.95).decided == "process"  # a busy host can lift the share: the probe wins
    assert decide(5, cpu=0.95).decided == "thread"
    # the GIL is free but the threads get 0.4 of a core each on a quiet host: they take
    # turns (short calls that each release it); on a busy host the share is blurred
    quiet = decide(5, cpu=0.40)
    assert quiet.decided == "process" and "take turns" in quiet.why
    busy = decide(5, cpu=0.40, runq=0.5)
    assert busy.decided == "thread" and "busy host" in busy.why
    io = decide(5, cpu=0.40, workers=8)  # more threads than cores: waiting on storage
    assert io.decided == "thread" and "more workers than cores" in io.why
    assert decide(45, cpu=0.40).decided == "process" and "in between" in decide(45, cpu=0.4).why
    assert decide(45, cpu=0.90).decided == "thread"
    assert GilReading(wakes=50, elapsed=auto.MIN_PROBE_SECONDS / 2, waited=0.04).fraction is None  # too short


def test_short_batches_are_timed_over_a_share_of_the_epoch() -> None:
    """Batches of a millisecond: 16 of them say nothing (and give the probe no time); the
    measurement goes on until MIN_SECONDS or a quarter of the epoch."""
    choice = AutoChoice(workers=2, cores=2, epoch_batches=400)
    choice.timed(True, cpu=0.001, wall=0.001)
    decided = [choice.timed(False, cpu=0.0009, wall=0.001) for _ in range(100)]
    assert decided[:99] == [None] * 99 and decided[99] == "thread"
    small = AutoChoice(workers=2, cores=2, epoch_batches=8)
    small.timed(True, cpu=0.001, wall=0.001)
    assert [small.timed(False, cpu=0.0009, wall=0.001) for _ in range(4)][-1] == "thread"


def _probe_while(work: Any = None, threads: int = 2, own: float = 0.4) -> float:
    """The probe's reading while ``threads`` run ``work``, over ``own`` seconds of the probe's
    own time (not waiting for a core). Counted in wall time (0.5 s before), a probe on a host
    at load 15 spent 0.43 of its 0.5 s waiting for a core: under MIN_PROBE_SECONDS of its own,
    its reading was None and the test failed."""
    probe = GilProbe(max_seconds=30)
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            work()

    workers = [threading.Thread(target=loop) for _ in range(threads if work is not None else 0)]
    for t in workers:
        t.start()
    probe.start()
    assert probe._thread is not None
    seen = probe.peek()
    while seen.elapsed - seen.runq < own and probe._thread.is_alive():
        time.sleep(0.05)
        seen = probe.peek()
    reading = probe.stop()
    stop.set()
    for t in workers:
        t.join()
    assert reading.fraction is not None, reading
    return reading.fraction


@pytest.mark.timeout(60)
def test_the_probe_finds_python_holding_the_gil_and_hashing_releasing_it() -> None:
    def python() -> None:
        x = 0
        for i in range(20_000):
            x += i * i

    blob = bytes(4 << 20)

    def hashing() -> None:
        hashlib.sha256(blob).digest()  # releases the GIL for the whole buffer

    assert _probe_while(python) >= auto.GIL_HELD[1]
    assert _probe_while(hashing) <= auto.GIL_HELD[0]


@pytest.mark.timeout(30)
def test_the_probe_stops_by_itself() -> None:
    probe = GilProbe(max_seconds=0.2)
    probe.start()
    assert probe._thread is not None
    probe._thread.join(10)
    reading = probe.stop()
    assert not probe._thread.is_alive() and reading.wakes > 3 and 0.2 <= reading.elapsed < 1.0
    # its reading over 0.2 s of wall time may be None on a loaded host (under MIN_PROBE_SECONDS
    # not waiting for a core); with nothing else running the GIL reads free over own time
    assert reading.fraction is None or reading.fraction <= auto.GIL_HELD[0], reading
    assert _probe_while(threads=0) <= auto.GIL_HELD[0]  # nothing else runs here


class _Seen(GilProbe):
    """A probe that has seen ``reading`` (not started: what it saw is given)."""

    def __init__(self, reading: GilReading) -> None:
        super().__init__()
        self.seen = reading

    def peek(self) -> GilReading:
        return self.seen

    def stop(self) -> GilReading:
        return self.seen


def test_clear_evidence_decides_before_the_measurement_is_long() -> None:
    """Short batches of a long epoch: a probe that has run CLEAR_PROBE_SECONDS and reads the
    GIL held (or free while the threads run) decides after `measure` batches, not after a
    quarter of the epoch; a reading in the middle keeps measuring."""
    def run(held: float, cpu: float) -> tuple[int, AutoChoice]:
        choice = AutoChoice(workers=2, cores=2, epoch_batches=4000)
        choice.gil = _Seen(GilReading(wakes=100, elapsed=auto.CLEAR_PROBE_SECONDS, waited=held * auto.CLEAR_PROBE_SECONDS))
        choice.timed(True, cpu=0.001, wall=0.001)
        for n in range(1, 101):
            if choice.timed(False, cpu=cpu * 0.001, wall=0.001) is not None:
                return n, choice
        return 0, choice

    n, held = run(0.9, cpu=0.5)
    assert (n, held.decided) == (4, "process") and "hold the GIL" in held.why
    n, free = run(0.05, cpu=0.95)
    assert (n, free.decided) == (4, "thread")
    assert run(0.45, cpu=0.95)[0] == 0  # in between: the full measurement (0.6 s) goes on
    assert run(0.05, cpu=0.5)[0] == 0  # free GIL, low share: not clear either
    young = AutoChoice(workers=2, cores=2, epoch_batches=4000)  # the probe ran too briefly
    young.gil = _Seen(GilReading(wakes=100, elapsed=auto.CLEAR_PROBE_SECONDS / 2, waited=0.09))
    young.timed(True, cpu=0.001, wall=0.001)
    assert [young.timed(False, cpu=0.0005, wall=0.001) for _ in range(8)] == [None] * 8


def test_a_short_epoch_stays_on_threads() -> None:
    """GIL-bound batches whose epoch would take less than SHORT_PASS_SECONDS on the threads:
    starting processes would not pay within it (a tiny dataset, a test's loader)."""
    def choose(epoch_batches: int) -> AutoChoice:
        choice = AutoChoice(workers=2, cores=2, epoch_batches=epoch_batches)
        choice.reading = GilReading(wakes=100, elapsed=1.0, waited=0.9)
        choice.timed(True, cpu=0.01, wall=0.01)
        while choice.decided is None:
            choice.timed(False, cpu=0.005, wall=0.01)
        return choice

    short = choose(16)  # 16 x 10 ms over 2 workers: 0.08 s
    assert short.decided == "thread" and "too short for processes" in short.why and "hold the GIL" in short.why
    assert choose(400).decided == "process"  # 2 s
