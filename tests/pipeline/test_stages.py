"""A stage written outside the pipeline runs in the workers without touching the runtime."""

from __future__ import annotations

import pytest
from loader_helpers import Doubled, Numbers, batch_ids

import feedline
from feedline.errors import WorkerError


@pytest.mark.timeout(120)
@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_an_extra_stage_transforms_and_filters(worker_type: str) -> None:
    stage = Doubled(reject=frozenset({5, 17}))
    with feedline.Loader(Numbers(40), batch_size=4, workers=2, worker_type=worker_type,
                         shuffle=False, on_error="skip", stages=[stage]) as loader:
        batches = list(loader)
        stats = loader.stats
    seen = [i for b in batches for i in batch_ids(b)]
    assert 5 not in seen and 17 not in seen and all(len(b["y"]) == 4 for b in batches)
    for b in batches:
        assert (b["x2"] == b["x"] * 2).all()
    assert stats["skipped"] == 2 and {s["stage"] for s in stats["skipped_samples"]} == {"double"}
    assert set(stats["recipes"].values()) == {"sample"}


def test_a_failing_stage_is_named_in_the_error() -> None:
    with feedline.Loader(Numbers(16), batch_size=4, workers=1, shuffle=False,
                         stages=[Doubled(reject=frozenset({2}))]) as loader, \
            pytest.raises(WorkerError) as info:
        list(loader)
    assert info.value.stage == "double" and info.value.key == "2"


def test_stages_must_be_named_callables() -> None:
    with pytest.raises(TypeError, match="stages"):
        feedline.Loader(Numbers(8), batch_size=4, stages=[lambda s, p: s])
