"""Which process's report ``feedline diagnose`` gives when the command's ranks train."""

from __future__ import annotations

import json
from pathlib import Path

from feedline.observe._stats import Span
from feedline.observe.diagnose import _read_report
from feedline.observe.report import Measurements, Report, build_report


def rank_report(rank: int, wait: float, body: float) -> Report:
    """A rank's own report: ``wait`` for data and ``body`` per step, 20 steps."""
    n = 20
    spans = [Span("fetch", i, i + 0.030, 1, 1, {"cpu": 0.001, "runq": 0.0}) for i in range(n)]
    rep = build_report(Measurements(
        name="r", device_type="cpu", wait=[wait] * n, body=[body] * n, gpu=[body] * n,
        spans=spans, cores=2, loader={"num_workers": 1, "batch_size": 8}))
    rep.host = rep.host | {"process": {"pid": 100 + rank, "rank": rank}}
    return rep


def write(tmp: Path, *reps: Report) -> None:
    for rep in reps:
        pid = rep.host["process"]["pid"]
        (tmp / f"proc-{pid}.json").write_text(json.dumps(rep.to_dict()))


def test_the_rank_waiting_for_data_paces_the_job(tmp_path: Path) -> None:
    # DDP: rank 1 waits 30 ms for data; rank 0 had its batch ready and waits for rank 1
    # in the all-reduce, inside its step (34 ms), so its own report sees compute
    rank0, rank1 = rank_report(0, 0.001, 0.034), rank_report(1, 0.028, 0.006)
    assert rank0.verdict != "data-bound" and rank1.verdict == "data-bound"
    write(tmp_path, rank0, rank1)
    rep = _read_report(tmp_path, tmp_path / "result.json", tmp_path / "partial.json")
    assert rep is not None and rep.host["process"]["rank"] == 1
    assert rep.verdict == "data-bound" and rep.binding == "read"
    (note,) = rep.host["notes"]
    assert "waiting for data" in note and "rank 0" in note and "its pace" in note


def test_rank_0_is_kept_when_it_waits_most_or_no_rank_is_data_bound(tmp_path: Path) -> None:
    write(tmp_path, rank_report(0, 0.028, 0.006), rank_report(1, 0.020, 0.006))
    rep = _read_report(tmp_path, tmp_path / "result.json", tmp_path / "partial.json")
    assert rep is not None and rep.host["process"]["rank"] == 0
    for p in tmp_path.glob("proc-*.json"):
        p.unlink()
    write(tmp_path, rank_report(0, 0.001, 0.040), rank_report(1, 0.001, 0.040))
    rep = _read_report(tmp_path, tmp_path / "result.json", tmp_path / "partial.json")
    assert rep is not None and rep.host["process"]["rank"] == 0 and rep.verdict != "data-bound"
    for p in tmp_path.glob("proc-*.json"):
        p.unlink()
    # ranks whose data cost the same (steps alike): rank 0, even when rank 1 waited a little more
    write(tmp_path, rank_report(0, 0.020, 0.006), rank_report(1, 0.024, 0.006))
    rep = _read_report(tmp_path, tmp_path / "result.json", tmp_path / "partial.json")
    assert rep is not None and rep.host["process"]["rank"] == 0


def test_the_rank_waiting_most_paces_the_job_and_the_others_collective_wait_is_said(
        tmp_path: Path) -> None:
    # both data-bound: rank 0 waits 14 ms for its own batch (a slow worker), rank 1 28 ms;
    # rank 0 then waits for rank 1 in the all-reduce (a 20 ms step body against rank 1's
    # 6 ms): the job runs at rank 1's pace
    rank0, rank1 = rank_report(0, 0.014, 0.020), rank_report(1, 0.028, 0.006)
    assert rank0.verdict == rank1.verdict == "data-bound"
    write(tmp_path, rank0, rank1)
    rep = _read_report(tmp_path, tmp_path / "result.json", tmp_path / "partial.json")
    assert rep is not None and rep.host["process"]["rank"] == 1
    (note,) = rep.host["notes"]
    assert "its pace" in note and "14 ms of its 20 ms mean step is waiting for" in note, note
