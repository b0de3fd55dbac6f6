"""The CPU of live child processes, handed to stage spans (feedline.children), and a
feedline.Loader process worker's recorder that puts it on its read/decode/transform spans
(a decoder process its ``decode=`` keeps: CPU work, not time blocked)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from feedline.children import SinceLast
from feedline.pipeline.workers_process import _recorder

SPIN = """
import sys, time
for line in sys.stdin:
    end = time.process_time() + float(line)
    while time.process_time() < end:
        pass
    sys.stdout.write("done\\n")
    sys.stdout.flush()
"""


def ask(proc: subprocess.Popen, seconds: float) -> None:
    """Have the kept decoder burn ``seconds`` of CPU and wait for its answer."""
    proc.stdin.write(f"{seconds}\n")
    proc.stdin.flush()
    assert proc.stdout.readline() == "done\n"


@pytest.mark.timeout(30)
def test_a_kept_decoders_cpu_goes_to_the_decode_spans_of_a_process_worker() -> None:
    proc = subprocess.Popen([sys.executable, "-S", "-u", "-c", SPIN], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, bufsize=1)
    try:
        timings: list = []
        record = _recorder(timings, SinceLast())
        t0 = time.perf_counter()
        record("decode", t0, t0, {"cpu": 0.0})  # the first span only takes the baseline
        ask(proc, 0.15)
        record("decode", t0, time.perf_counter(), {"cpu": 0.0, "worker": "w0"})
        ask(proc, 0.05)
        record("collate", t0, time.perf_counter(), {"cpu": 0.0})  # not a stage that waits on it
        record("read", t0, time.perf_counter(), {"cpu": 0.0})
        record("decode", t0, time.perf_counter(), {"cpu": 0.0})  # nothing new since
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)
    first, decoded, collated, read, idle = (attrs for _, _, _, attrs in timings)
    assert "child_cpu" not in first and "child_cpu" not in collated and "child_cpu" not in idle
    assert 0.12 <= decoded["child_cpu"] <= 0.4 and decoded["worker"] == "w0"
    # the collate span in between took none of it: the next stage that may wait on it does
    assert 0.03 <= read["child_cpu"] <= 0.3
