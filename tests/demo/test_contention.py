"""The demo notices a busy host: real CPU hogs, the kernel's own counters."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from rich.console import Console
from test_table import AFTER, BEFORE

from feedline.cores import usable_cores
from feedline.demo import contention
from feedline.demo.contention import Snapshot, assess
from feedline.demo.table import comparison, headline, host_lines, render

HOG = ("import sys\n"
       "sys.stdout.write('x'); sys.stdout.flush()\n"  # tell the test it runs, then spin
       "while True:\n    pass\n")


@pytest.fixture
def hogs() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Two spinning processes per usable core, each confirmed running (pipe, not sleep)."""
    procs = [subprocess.Popen([sys.executable, "-c", HOG], stdout=subprocess.PIPE)
             for _ in range(2 * usable_cores() + 1)]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.read(1) == b"x"
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(timeout=30)


def _work() -> int:
    """A fixed amount of CPU work on this thread (about 0.3 s alone on one core)."""
    return sum(i * i for i in range(3_000_000))


@pytest.mark.timeout(120)
@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="Linux /proc counters")
def test_cpu_hogs_are_detected(hogs: list[subprocess.Popen[bytes]]) -> None:
    before = contention.snapshot()
    _work()
    load = assess(before, contention.snapshot())
    assert load.contended, load
    assert load.own_wait_share is not None and load.own_wait_share > contention.OWN_WAIT_SHARE
    assert any("waited for a core" in r for r in load.reasons)
    if load.pressure_some is not None:
        assert load.pressure_some > contention.PRESSURE_SOME


def _snap(t_s: float, *, load: float | None = 0.2, psi_us: int | None = 0,
          rq_ns: int | None = 0, own: dict[int, tuple[int, int]] | None = None) -> Snapshot:
    return Snapshot(int(t_s * 1e9), load, psi_us, rq_ns, own or {})


QUIET = (_snap(0.0, own={1: (0, 0)}), _snap(1.0, psi_us=50_000, rq_ns=100_000_000,
                                             own={1: (900_000_000, 10_000_000)}))


def test_quiet_host_is_not_contended() -> None:
    load = assess(*QUIET, cores=4)
    assert not load.contended and load.reasons == []
    assert load.pressure_some == pytest.approx(0.05)
    assert load.runqueue_per_core == pytest.approx(0.025)
    assert load.own_wait_share == pytest.approx(0.01 / 0.91)


@pytest.mark.parametrize(("change", "word"), [
    ({"load": 9.0}, "load average 9.0 on 4"),
    ({"psi_us": 800_000}, "CPU pressure"),
    ({"rq_ns": 4_000_000_000}, "run queue"),
    ({"own": {1: (300_000_000, 600_000_000), 2: (10, 10)}}, "this process's threads"),
])
def test_each_signal_alone_marks_the_host_busy(change: dict, word: str) -> None:
    first, last = QUIET
    if "load" in change:
        first = dataclasses.replace(first, loadavg=change.pop("load"))
    fields = {"psi_us": "pressure_some_us", "rq_ns": "runqueue_wait_ns", "own": "own"}
    last = dataclasses.replace(last, **{fields[k]: v for k, v in change.items()})
    load = assess(first, last, cores=4)
    assert load.contended and len(load.reasons) == 1 and word in load.reasons[0], load.reasons


def test_missing_sources_are_none_and_unused() -> None:
    blank = Snapshot(0, None, None, None, {}), Snapshot(10**9, None, None, None, {})
    load = assess(*blank, cores=2)
    assert (load.load_before, load.pressure_some, load.runqueue_per_core,
            load.own_wait_share, load.contended) == (None, None, None, None, False)


def test_kernel_file_parsers() -> None:
    psi = "some avg10=87.91 avg60=84.11 avg300=72.39 total=613883210\nfull avg10=0.00 total=0\n"
    assert contention._pressure_some_us(psi) == 613883210
    assert contention._pressure_some_us(None) is None
    stat = ("version 15\ntimestamp 4295\n"
            "cpu0 0 0 10 2 5 3 1000 700 9\ndomain0 3 0 0 0\n"
            "cpu1 0 0 10 2 5 3 1000 500 9\ncpu2 0 0 10 2 5 3 1000 9000 9\n")
    assert contention._runqueue_wait_ns(stat, {0, 1}) == 1200
    assert contention._runqueue_wait_ns(stat, {7}) is None


def test_busy_host_is_said_beside_the_table_and_in_the_headline() -> None:
    first, last = QUIET
    busy = assess(dataclasses.replace(first, loadavg=7.5), last, cores=2)
    quiet = assess(*QUIET, cores=2)
    c = comparison(BEFORE, AFTER)
    console = Console(record=True, width=200)
    render(c, console, {"before": quiet, "after": busy})
    text = console.export_text()
    warn = text.index("busy host during the after run: load average 7.5 on 2 core(s)")
    assert text.index("samples/s") < warn < text.index("speedup (samples/s, measured on a busy host")
    assert "not representative" in headline(c, {"after": busy})[0]
    calm = Console(record=True, width=200)
    render(c, calm, {"before": quiet, "after": quiet})
    assert "busy host" not in calm.export_text() and host_lines({"after": quiet}) == []
    top = headline(c, {"after": quiet})
    assert top[0].startswith("Speedup 2.50x: 40.0 -> 100.0 samples/s") and len(top) == 2
