"""Exact resume: state_dict() at every stop point, then load, continue, compare."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from loader_helpers import Numbers, batch_ids

import feedline
from feedline.errors import StateError

EPOCHS = 2


def _take(loader: feedline.Loader, epochs: int, stop: int | None, start_state: Any = None
          ) -> tuple[list[list[int]], dict[str, Any]]:
    """Deliver batches epoch by epoch (set_epoch in the loop, like a training script),
    stopping after ``stop`` batches; returns them and the JSON round-tripped state."""
    if start_state is not None:
        loader.load_state_dict(start_state)
    first = loader.epoch if start_state is not None else 0
    got: list[list[int]] = []
    for epoch in range(first, epochs):
        loader.set_epoch(epoch)
        it = iter(loader)
        while stop is None or len(got) < stop:
            batch = next(it, None)
            if batch is None:
                break
            got.append(batch_ids(batch))
        if stop is not None and len(got) == stop:
            break
    return got, json.loads(json.dumps(loader.state_dict()))


def run_test_save_load_state(make: Callable[[], feedline.Loader], stops: list[int],
                             ordered: bool = True) -> None:
    """For each stop: run to it, save, resume in a new loader, stop again half-way,
    resume once more; the concatenation must equal one uninterrupted run."""
    with make() as ref_loader:
        reference, _ = _take(ref_loader, EPOCHS, None)
    for stop in stops:
        with make() as a:
            part1, s1 = _take(a, EPOCHS, stop)
        second = (len(reference) - stop) // 2
        with make() as b:
            part2, s2 = _take(b, EPOCHS, second, s1)
        with make() as c:
            part3, _ = _take(c, EPOCHS, None, s2)
        got = part1 + part2 + part3
        if ordered:
            assert got == reference, f"stop={stop}"
        else:
            assert sorted(map(tuple, got)) == sorted(map(tuple, reference)), f"stop={stop}"


def test_resume_at_every_stop_point() -> None:
    def make() -> feedline.Loader:
        return feedline.Loader(Numbers(41), batch_size=4, workers=3, prefetch=3, seed=11)

    run_test_save_load_state(make, stops=list(range(0, 21)))  # 10 per epoch: ends included


def test_resume_out_of_order() -> None:
    def make() -> feedline.Loader:
        return feedline.Loader(Numbers(40), batch_size=4, workers=3, seed=2, in_order=False)

    run_test_save_load_state(make, stops=[0, 3, 7, 10, 13], ordered=False)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_resume_with_process_workers() -> None:
    def make() -> feedline.Loader:
        return feedline.Loader(Numbers(24), batch_size=4, workers=2, worker_type="process",
                               seed=3)

    run_test_save_load_state(make, stops=[5])


def test_state_is_small_json_and_checked_on_load() -> None:
    loader = feedline.Loader(Numbers(40), batch_size=4, workers=1, seed=1)
    state = loader.state_dict()
    assert len(json.dumps(state)) < 1000
    for kwargs, field in [({"seed": 2}, "seed"), ({"batch_size": 8}, "batch_size"),
                          ({"world_size": 2}, "world_size")]:
        other = feedline.Loader(Numbers(40), **{"batch_size": 4, "workers": 1, "seed": 1,
                                                 **kwargs})
        with pytest.raises(StateError, match=field) as info:
            other.load_state_dict(state)
        assert info.value.field == field
        other.close()
    with pytest.raises(StateError) as info:
        feedline.Loader(Numbers(41), batch_size=4, workers=1, seed=1).load_state_dict(state)
    assert info.value.field == "fingerprint"
    with pytest.raises(StateError, match="version"):
        loader.load_state_dict({"nonsense": 1})
    loader.close()
