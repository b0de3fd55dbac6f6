"""A session's raw measurements cross a process boundary as JSON and give the same report.

``feedline diagnose`` keeps partial results this way (the training process copies its
lists; the diagnose process analyses them only when the run was killed).
"""

from __future__ import annotations

import json
import time

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from feedline import spans
from feedline.observe._session import Session
from feedline.observe._snapshot import restore, snapshot


class Slow(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 256

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(0.0005)
        return torch.full((4,), float(i))


@pytest.mark.parametrize("workers", [0, 1])
def test_a_restored_snapshot_reports_what_the_session_reports(workers: int) -> None:
    train = DataLoader(Slow(), batch_size=4, num_workers=workers)
    val = DataLoader(Slow(), batch_size=8)
    session = Session("snap", "cpu").start()
    try:
        for k, _batch in enumerate(train):
            time.sleep(0.002)
            if k % 10 == 9:
                for _vb in val:
                    if _vb[0, 0] > 16:
                        break
                with spans.span("checkpoint", note=object()):  # an attribute JSON cannot carry
                    pass
            if k == 30:
                break
        data = json.loads(json.dumps(snapshot(session)))  # as the diagnose process reads it
        here = session.partial_report()
        there = restore(data).partial_report()  # (before stop: worker spans are still on disk)
    finally:
        session.stop()
    assert there.steps == here.steps == 30
    assert (there.verdict, there.binding) == (here.verdict, here.binding)
    assert there.stall_fraction == pytest.approx(here.stall_fraction, rel=0.05)
    assert {k: v.count for k, v in there.stages.items() if k != "step"} == {
        k: v.count for k, v in here.stages.items() if k != "step"}
    assert [o["label"] for o in there.loaders] == [o["label"] for o in here.loaders]
    assert there.loaders[0]["steps"] == here.loaders[0]["steps"] > 0


def test_restore_refuses_what_is_not_a_snapshot() -> None:
    with pytest.raises(ValueError, match="snapshot"):
        restore({"version": 0})
