"""Loader on device="cpu": contents, held batches, overlap, out-of-order, collate paths."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from loader_helpers import Numbers, batch_ids, flat

import feedline
from feedline.errors import ResourceError


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_epoch_covers_the_rank_order_in_order(worker_type: str) -> None:
    with feedline.Loader(Numbers(50), batch_size=8, workers=2, worker_type=worker_type,
                         seed=5) as loader:
        loader.set_epoch(2)
        got = [batch_ids(b) for b in loader]
        assert [len(g) for g in got] == [8] * 6  # drop_last: 50 -> 48
        order = np.random.Generator(np.random.PCG64([5, 2])).permutation(50)[:48]
        assert flat(got) == order.tolist()
        assert got[0] and all(isinstance(k, str) for k in loader.state_dict()["fingerprint"])


def test_drop_last_false_keeps_the_short_batch() -> None:
    loader = Loader_ = feedline.Loader(Numbers(10), batch_size=4, workers=2, shuffle=False,
                                       drop_last=False)
    got = [batch_ids(b) for b in loader]
    assert got == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert len(Loader_) == 3
    loader.close()


def test_held_batches_are_never_overwritten() -> None:
    # A pool of two slots must be recycled many times while the user holds ten batches.
    one_slot = 16 * (4 * 4 + 8)
    loader = feedline.Loader(Numbers(160), batch_size=16, workers=2, prefetch=2,
                             pinned_budget=2 * one_slot, shuffle=False)
    held = list(loader)
    assert len(held) == 10
    for b, batch in enumerate(held):
        assert batch_ids(batch) == list(range(16 * b, 16 * b + 16))
    assert loader.stats["pinned_peak_bytes"] <= 2 * one_slot
    loader.close()


def test_cpu_batches_reuse_a_few_slots_and_held_views_stay_intact() -> None:
    loader = feedline.Loader(Numbers(640), batch_size=16, workers=2, prefetch=2, shuffle=False)
    kept = []
    for b, batch in enumerate(loader):
        if b % 10 == 0:
            kept.append((b, batch["x"][5:7], batch["y"].numpy()[:4]))  # views, not the batch
    # about workers + prefetch + the user's + the 4 held; a slot that comes back just
    # after a producer looked for one adds a new one, hence the margin (without reuse: 40)
    assert loader.stats["slots_created"] <= 20
    for b, x, y in kept:
        assert y.tolist() == list(range(16 * b, 16 * b + 4))
        assert x[:, 0].tolist() == [16 * b + 5, 16 * b + 6]
    loader.close()


def test_default_workers_follow_the_cores_this_process_may_use() -> None:
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(before)})  # this thread only; restored below
        assert feedline.Loader(Numbers(8), batch_size=4).workers == 1
    finally:
        os.sched_setaffinity(0, before)
    assert feedline.Loader(Numbers(8), batch_size=4).workers == min(8, len(before))
    assert feedline.Loader(Numbers(8), batch_size=4, workers=12).workers == 12  # asked for


def test_default_workers_respect_a_cgroup_cpu_quota(tmp_path: Path) -> None:
    from feedline.pipeline.loader import default_workers

    cgroup = tmp_path / "fs" / "cgroup"
    cgroup.mkdir(parents=True)
    (cgroup / "cpu.max").write_text("100000 100000\n")  # 1 CPU: a container limit
    assert default_workers(tmp_path) == 1
    (cgroup / "cpu.max").write_text("250000 100000\n")  # 2.5 CPUs count as 3
    assert default_workers(tmp_path) == min(3, len(os.sched_getaffinity(0)))
    (cgroup / "cpu.max").write_text("max 100000\n")
    assert default_workers(tmp_path) == min(8, len(os.sched_getaffinity(0)))


def test_batches_are_prepared_while_the_user_computes() -> None:
    # The transform of batch 3 must run while the consumer still holds batch 0.
    seen = threading.Event()

    def transform(sample: dict[str, Any]) -> dict[str, Any]:
        if sample["y"] >= 24:
            seen.set()
        return sample

    with feedline.Loader(Numbers(64), batch_size=8, workers=2, prefetch=2, shuffle=False,
                         transform=transform) as loader:
        it = iter(loader)
        first = next(it)
        assert seen.wait(timeout=20), "later batches were not prepared ahead"
        assert batch_ids(first) == list(range(8))


def test_out_of_order_delivers_everything_once() -> None:
    gate = threading.Event()

    def slow_second(sample: dict[str, Any]) -> dict[str, Any]:
        if sample["y"] == 8:
            gate.wait(timeout=20)  # a straggler holding batch 1
        return sample

    with feedline.Loader(Numbers(48), batch_size=8, workers=3, shuffle=False,
                         transform=slow_second, in_order=False) as loader:
        it = iter(loader)
        first = batch_ids(next(it))
        assert first[0] == 0  # batch 0 decides the layout: it always comes first
        second = batch_ids(next(it))
        assert second[0] != 8  # the straggler did not block delivery
        gate.set()
        rest = [batch_ids(b) for b in it]
        assert sorted(flat([first, second, *rest])) == list(range(48))


def test_tuple_samples_and_custom_collate() -> None:
    class Pairs:
        def __len__(self) -> int:
            return 12

        def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
            return torch.full((2, 3), float(i)), i

    with feedline.Loader(Pairs(), batch_size=4, workers=2, shuffle=False) as loader:
        x, y = next(iter(loader))
        assert x.shape == (4, 2, 3) and y.tolist() == [0, 1, 2, 3]
        assert x[3, 1, 2].item() == 3.0

    def my_collate(samples: list[tuple[torch.Tensor, int]]) -> dict[str, Any]:
        return {"sum": torch.stack([s[0] for s in samples]).sum(0), "n": len(samples)}

    with feedline.Loader(Pairs(), batch_size=4, workers=2, shuffle=False,
                         collate=my_collate) as loader:
        batch = next(iter(loader))
        assert batch["n"] == 4 and batch["sum"][0, 0].item() == 6.0
        assert sorted(batch) == ["n", "sum"]  # as the collate returned it: model(**batch) works


def test_ragged_fields_become_lists() -> None:
    class Ragged:
        def __len__(self) -> int:
            return 8

        def __getitem__(self, i: int) -> dict[str, Any]:
            return {"tokens": np.arange(i + 1), "label": i}

    with feedline.Loader(Ragged(), batch_size=4, workers=1, shuffle=False) as loader:
        batch = next(iter(loader))
        assert isinstance(batch["tokens"], list)
        assert [t.tolist() for t in batch["tokens"]] == [[0], [0, 1], [0, 1, 2], [0, 1, 2, 3]]
        assert batch["label"].tolist() == [0, 1, 2, 3]


def test_packed_dataset_end_to_end(packed: Path) -> None:
    ds = feedline.open_dataset(packed)
    with feedline.Loader(ds, batch_size=8, workers=2, shuffle=False) as loader:
        batches = list(loader)
    assert len(batches) == 5
    b = batches[1]
    assert b["jpg"].shape == (8, 24, 32, 3) and b["jpg"].dtype == torch.uint8
    assert b["cls"].tolist() == list(range(8, 16))
    assert b["npy"][:, 0].tolist() == list(range(8, 16))
    assert b["f32"][:, 0].tolist() == [float(i) for i in range(8, 16)]
    assert b["__key__"] == [f"s{i:04d}" for i in range(8, 16)]


def test_process_workers_on_packed_dataset(packed: Path) -> None:
    loader = feedline.Loader(str(packed), batch_size=8, workers=2, worker_type="process",
                             shuffle=False)
    keys = [k for b in loader for k in b["__key__"]]
    assert keys == [f"s{i:04d}" for i in range(40)]
    loader.close()


def test_a_batch_bigger_than_the_budget_fails_at_the_first_batch() -> None:
    loader = feedline.Loader(Numbers(64), batch_size=32, workers=1, pinned_budget="256B")
    with pytest.raises(ResourceError, match="pinned_budget"):
        next(iter(loader))
    loader.close()


def test_bad_arguments_name_the_parameter() -> None:
    for kwargs, name in [({"batch_size": 0}, "batch_size"), ({"workers": -1}, "workers"),
                         ({"worker_type": "fiber"}, "worker_type"),
                         ({"on_error": "ignore"}, "on_error"), ({"device": "tpu"}, "device"),
                         ({"pinned_budget": "lots"}, "pinned_budget"),
                         ({"timeout": "soon"}, "timeout"), ({"seed": -1}, "seed")]:
        with pytest.raises(ValueError, match=name):
            feedline.Loader(Numbers(100), **kwargs)
    with pytest.raises(TypeError, match="dataset"):
        feedline.Loader(object())
    with pytest.raises(TypeError, match="transform"):
        feedline.Loader(Numbers(8), transform=3)  # type: ignore[arg-type]


def test_loader_path_uses_a_host_backend_and_refuses_gds(tmp_path):
    from loader_helpers import make_packed

    import feedline
    from feedline.errors import ConfigError

    root = make_packed(tmp_path, 8)
    with feedline.Loader(str(root), batch_size=4, workers=1, io="auto") as loader:
        assert loader._source.dataset.backend.name in ("buffered", "direct")
    with pytest.raises(ConfigError, match="gds"):
        feedline.Loader(str(root), batch_size=4, workers=1, io="gds")


def test_io_is_checked_and_never_silently_ignored(tmp_path):
    from loader_helpers import make_packed

    import feedline
    from feedline.errors import ConfigError

    root = make_packed(tmp_path, 8)
    with pytest.raises(ConfigError, match="io must be one of"):
        feedline.Loader(str(root), batch_size=4, workers=1, io="nvme")
    opened = feedline.open_dataset(root, io="buffered")
    with feedline.Loader(opened, batch_size=4, workers=1, io="buffered") as loader:  # the same: fine
        assert sum(1 for _ in loader) == 2
    with pytest.raises(ConfigError, match="opened with io='buffered'") as e:
        feedline.Loader(opened, batch_size=4, workers=1, io="direct")
    assert "open_dataset(path, io=" in (e.value.fix or "")
    with pytest.raises(ConfigError, match="not a packed feedline dataset"):
        feedline.Loader(Numbers(8), batch_size=4, workers=1, io="direct")
