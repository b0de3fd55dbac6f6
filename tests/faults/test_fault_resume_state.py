"""Resume state under corruption: every malformed ``state_dict`` is a StateError naming
the key (never AttributeError/TypeError, never a silently empty epoch), and every
state that passes the checks resumes exactly."""

from __future__ import annotations

import json
from typing import Any

import pytest
from faults_helpers import Numbers, ids
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import feedline
from feedline.errors import StateError

N, B = 40, 4  # 10 batches per epoch


def _loader(**kw: Any) -> feedline.Loader:
    return feedline.Loader(Numbers(N), batch_size=B, workers=1, seed=3,
                           **{"in_order": False, **kw})


@pytest.fixture(scope="module")
def saved() -> dict[str, Any]:
    with _loader(in_order=True) as loader:
        loader.set_epoch(2)
        it = iter(loader)
        for _ in range(3):
            next(it)
        state = loader.state_dict()
    return json.loads(json.dumps(state))


CORRUPT: list[tuple[str, Any, str]] = [
    ("batches_done", 10**9, "batches_done"),
    ("batches_done", 11, "batches_done"),
    ("batches_done", -1, "batches_done"),
    ("batches_done", "5", "batches_done"),
    ("batches_done", 5.5, "batches_done"),
    ("batches_done", True, "batches_done"),
    ("batches_done", None, "batches_done"),
    ("epoch", 10**30, "epoch"),
    ("epoch", -2, "epoch"),
    ("epoch", "2", "epoch"),
    ("extra_done", [10**12], "extra_done"),
    ("extra_done", [5, 5], "extra_done"),
    ("extra_done", [-1], "extra_done"),
    ("extra_done", [3], "extra_done"),  # == batches_done: already counted
    ("extra_done", list(range(4, 10**6)), "extra_done"),
    ("extra_done", "5", "extra_done"),
    ("extra_done", {"a": 1}, "extra_done"),
    ("extra_done", [True], "extra_done"),
    ("counters", {"batches": "5"}, "counters"),
    ("counters", {"batches": 5.5}, "counters"),
    ("counters", {"batches": -1}, "counters"),
    ("counters", {"nonsense": 1}, "counters"),
    ("counters", [1, 2], "counters"),
    ("version", True, "version"),
    ("version", 2, "version"),
    ("seed", 4, "seed"),
    ("seed", "3", "seed"),
    ("shuffle", 1, "shuffle"),
    ("world_size", 2, "world_size"),
    ("rank", True, "rank"),
    ("fingerprint", 7, "fingerprint"),
]


@pytest.mark.parametrize(("key", "value", "field"), CORRUPT,
                         ids=[f"{k}={v!r}"[:40] for k, v, _ in CORRUPT])
def test_a_corrupt_value_is_a_state_error_naming_the_key(
        saved: dict[str, Any], key: str, value: Any, field: str) -> None:
    with _loader() as loader:
        with pytest.raises(StateError) as info:
            loader.load_state_dict({**saved, key: value})
        assert info.value.field.split(".")[0] == field and info.value.fix


@pytest.mark.parametrize("key", ["version", "fingerprint", "epoch", "batches_done",
                                 "extra_done", "seed"])
def test_a_missing_key_is_named(saved: dict[str, Any], key: str) -> None:
    with _loader() as loader, pytest.raises(StateError) as info:
        loader.load_state_dict({k: v for k, v in saved.items() if k != key})
    assert info.value.field == key


@pytest.mark.parametrize("junk", [None, 5, "state", [1, 2], b"{}"])
def test_not_a_mapping_is_a_state_error(junk: Any) -> None:
    with _loader() as loader, pytest.raises(StateError):
        loader.load_state_dict(junk)


def test_state_of_another_dataset_or_world_size_is_refused(saved: dict[str, Any]) -> None:
    for other, field in ((feedline.Loader(Numbers(N + 1), batch_size=B, workers=1, seed=3,
                                          in_order=False), "fingerprint"),
                         (_loader(rank=1, world_size=2), "world_size")):
        with other, pytest.raises(StateError) as info:
            other.load_state_dict(saved)
        assert info.value.field == field


def _epoch_batches(epoch: int) -> list[list[int]]:
    with _loader(in_order=True) as ref:
        ref.set_epoch(epoch)
        return [ids(b) for b in ref]


VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 12),
                   st.integers(-(10**40), 10**40), st.floats(allow_nan=True),
                   st.text(max_size=4), st.lists(st.integers(-2, 12), max_size=12),
                   st.dictionaries(st.text(max_size=8), st.integers(-2, 5), max_size=3))
KEYS = st.sampled_from(["version", "fingerprint", "seed", "batch_size", "world_size",
                        "rank", "shuffle", "drop_last", "epoch", "batches_done",
                        "extra_done", "counters"])


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.dictionaries(KEYS, VALUES, min_size=1, max_size=3))
def test_random_corruption_is_refused_or_resumes_exactly(
        saved: dict[str, Any], changes: dict[str, Any]) -> None:
    state = {**saved, **changes}
    with _loader() as loader:
        try:
            loader.load_state_dict(state)
        except StateError as exc:
            assert exc.field.split(".")[0] in state
            return
        # accepted: it must be a real position, and the rest of that epoch comes exactly
        epoch, done = state["epoch"], state["batches_done"]
        extra = set(state["extra_done"])
        expected = [b for i, b in enumerate(_epoch_batches(epoch))
                    if i >= done and i not in extra]
        got = [ids(b) for b in loader]
        assert sorted(map(tuple, got)) == sorted(map(tuple, expected))


@pytest.mark.timeout(120)
def test_resume_after_the_dataset_was_re_packed(tmp_path: Any) -> None:
    """Re-packed with the same shards: resumes exactly (also through a Checkpointer, as JSON).
    Re-packed into other shards, or with one file changed: refused, and the error says why
    and what to do (before: "build the loader with the same fingerprint")."""
    from feedline.checkpoint import Checkpointer
    from feedline.format import pack

    src = tmp_path / "src"
    src.mkdir()
    for i in range(40):
        (src / f"s{i:02d}.bin").write_bytes(bytes([i]) * (100 + i))

    def loader(name: str) -> feedline.Loader:
        return feedline.Loader(feedline.open_dataset(tmp_path / name), batch_size=4, workers=1, seed=5)

    def keys(batch: dict[str, Any]) -> list[str]:
        return list(batch["__key__"])

    pack(src, tmp_path / "a", shard_size=2000)
    with loader("a") as first:
        it = iter(first)
        for _ in range(3):
            next(it)
        saved = first.state_dict()
        rest = [keys(b) for b in it]
    pack(src, tmp_path / "same", shard_size=2000)
    with Checkpointer(tmp_path / "ck") as ck:
        ck.save(1, {"loader": saved})
        through_checkpoint = ck.load()["loader"]
    with loader("same") as again:
        again.load_state_dict(through_checkpoint)
        assert [keys(b) for b in again] == rest
    pack(src, tmp_path / "reshard", shard_size=5000)
    (src / "s07.bin").write_bytes(b"changed")
    pack(src, tmp_path / "changed", shard_size=2000)
    for name in ("reshard", "changed"):
        with loader(name) as other, pytest.raises(StateError, match="re-packed into other shards") as info:
            other.load_state_dict(saved)
        assert info.value.field == "fingerprint" and "start the epoch anew" in info.value.fix
