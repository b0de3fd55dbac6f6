"""What the diagnose hooks cost the measured process, and that the savings keep the figures.

The hooks run on every step of the user's loop, on caches a 10 ms step has made cold:
spans are stored without objects the garbage collector tracks, the loop's own batch work
is timed on a sample of steps past the first ones (and weighed back), a fetch reads the
ended children's CPU once unless children end around it, and a forked copy of the hooks
knows it is one without a system call on each hook.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import time

import pytest
import torch
from obsdata import External
from torch.utils.data import DataLoader, Dataset

from feedline.observe._session import Session
from feedline.observe._stats import Recorder
from feedline.observe._torch_hooks import ARM_EVERY, ARM_FIRST, CopyLog, HookTargets, TorchHooks

SPIN = (f"import time\nend = time.process_time() + {0.02}\n"
        "while time.process_time() < end:\n    pass\n")


def spin_child() -> None:
    subprocess.run([sys.executable, "-S", "-c", SPIN], check=True)


def test_recorded_spans_make_no_object_the_garbage_collector_tracks() -> None:
    # a tuple holding the attrs dict stays tracked: 5,000 spans were 5,000 more objects for
    # every full collection of the training process to walk, and brought those sooner
    rec = Recorder()
    gc.collect()
    before = len(gc.get_objects())
    for i in range(5000):
        rec.record("fetch", float(i), i + 0.5, {"cpu": 0.1, "loader": "loader-1"})
    gc.collect()
    assert len(gc.get_objects()) - before < 100
    assert len(rec.spans("fetch")) == 5000 and rec.rows()[7][:3] == ("fetch", 7.0, 7.5)


def test_the_loops_batch_work_is_sampled_past_the_first_batches_and_weighed_back() -> None:
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(240 * 4, 8))
    model = torch.nn.Linear(8, 1)
    s = Session("run", "cpu").start()
    try:
        for (x,) in DataLoader(data, batch_size=4):
            end = time.perf_counter() + 0.001  # the loop's own work on the batch: 1 ms
            while time.perf_counter() < end:
                pass
            model(x).sum().backward()
        rep = s.report()
    finally:
        s.stop()
    spans = s.recorder.spans("loop_transform")
    first = [sp for sp in spans if "every" not in sp.attrs]
    later = [sp for sp in spans if "every" in sp.attrs]
    assert len(first) == ARM_FIRST and all(sp.attrs["every"] == ARM_EVERY for sp in later)
    # about one in ARM_EVERY of the 208 later batches (drawn), not every one
    assert 208 // ARM_EVERY // 3 <= len(later) <= 3 * 208 // ARM_EVERY
    assert all(sp.duration >= 0.0009 for sp in spans)
    assert rep.analysis["per_batch"]["loop_transform"] >= 0.0009


def test_a_sampled_loop_transform_span_counts_for_the_batches_it_stands_for() -> None:
    from test_observe_report import meas

    from feedline.observe._stats import Span
    from feedline.observe.report import build_report

    def stall(spans: list[Span]) -> float:
        m = meas(wait=0.001, body=0.040, fetch=0.001, cpu=0.001, workers=2, n=40)
        m.spans += spans
        return build_report(m).stall_fraction

    every = [Span("loop_transform", i + 0.5, i + 0.53, 1, 1, {}) for i in range(40)]
    sampled = [Span("loop_transform", i + 0.5, i + 0.53, 1, 1, {"every": 8}) for i in range(0, 40, 8)]
    assert stall(sampled) == pytest.approx(stall(every), rel=0.02) and stall(every) > 0.5


def hooks() -> tuple[TorchHooks, Recorder]:
    rec = Recorder()
    h = TorchHooks(HookTargets(rec, CopyLog(), lambda owner, fetch: fetch(), lambda *a: None,
                               lambda loader: "L", lambda: "L", None))
    return h, rec


class LateDecoder(Dataset):  # type: ignore[type-arg]
    """Items from ``late`` on are decoded by a child interpreter (20 ms of CPU each)."""

    def __init__(self, n: int, late: int) -> None:
        self.n, self.late = n, late

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        if i >= self.late:
            spin_child()
        return torch.full((2,), float(i))


@pytest.mark.timeout(60)
def test_children_the_loop_runs_between_fetches_are_not_charged_to_them() -> None:
    # past its first fetches a fetch reads the ended children once, at its end: a child
    # the loop ran and waited for (a ``git`` or ``nvidia-smi`` call) must not be decode
    h, rec = hooks()
    with h.installed():
        for i, _ in enumerate(DataLoader(torch.arange(20.0), batch_size=2)):
            if i >= 6:
                spin_child()
    fetches = rec.spans("fetch")
    assert len(fetches) == 10
    assert all(sp.attrs.get("child_cpu", 0.0) < 0.01 for sp in fetches), [sp.attrs for sp in fetches]


@pytest.mark.timeout(60)
def test_a_dataset_whose_items_start_decoders_late_is_charged_from_then_on() -> None:
    h, rec = hooks()
    with h.installed():
        batches = list(DataLoader(LateDecoder(n=24, late=12), batch_size=2))
    assert len(batches) == 12
    fetches = sorted(rec.spans("fetch"), key=lambda sp: sp.start)
    charged = [sp.attrs.get("child_cpu", 0.0) >= 0.8 * 2 * 0.02 for sp in fetches]
    # fetch 6 is the first with children, read at its end only: its share is unknown
    assert not any(charged[:6]) and all(charged[7:]), [sp.attrs for sp in fetches]


@pytest.mark.timeout(60)
def test_the_first_fetches_read_both_ends() -> None:
    h, rec = hooks()
    with h.installed():
        list(DataLoader(External(spin=0.02, n=4), batch_size=2))
    assert all(sp.attrs.get("child_cpu", 0.0) >= 0.8 * 2 * 0.02 for sp in rec.spans("fetch"))


@pytest.mark.timeout(60)
def test_hooks_forked_into_another_process_pass_through() -> None:
    h, rec = hooks()
    with h.installed():
        assert h._here()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: its copy of the hooks is not live
            try:
                out = list(DataLoader(torch.arange(4.0), batch_size=2))
                ok = len(out) == 2 and not h._here() and not rec.spans("fetch")
                os.write(w, b"1" if ok else b"0")
            finally:
                os._exit(0)
        os.close(w)
        _, status = os.waitpid(pid, 0)
        got = os.read(r, 1)
        os.close(r)
        list(DataLoader(torch.arange(4.0), batch_size=2))
    assert status == 0 and got == b"1"
    assert len(rec.spans("fetch")) == 2  # the parent's own


def test_a_partial_report_is_written_in_pieces_that_join_into_the_same_json() -> None:
    # one json.dumps of a long run's snapshot held the GIL for tens of milliseconds while
    # the training thread waited; the pieces are bounded and the writer pauses between them
    import json

    from feedline.observe._child import PIECE_ITEMS, json_pieces

    data = {"spans": {"start": [i * 0.5 for i in range(5 * PIECE_ITEMS)], "stage": ["fetch"] * 10},
            "clocks": [{"label": "loader-1", "waits": [0.1] * 3000, "config": {"a": None}}],
            "notes": [], "host": {"series": [{}], "s": 'q"'}}
    pieces = list(json_pieces(data))
    assert json.loads("".join(pieces)) == data
    assert max(len(p) for p in pieces) < len(json.dumps(data)) / 4
