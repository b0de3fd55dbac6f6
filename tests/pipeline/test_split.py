"""A batch split among thread workers (parts of its rows, one slot) is the batch one worker
fills: same bytes, same order, same resume, same skips and errors."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from loader_helpers import pack_jpegs

import feedline
from feedline.errors import WorkerError
from feedline.pipeline import split
from feedline.pipeline.options import SkippedSampleWarning


def _pack(root: Path, n: int, bad: int | None = None) -> Path:
    return Path(pack_jpegs(root, n, (16, 24), cut=bad, quality=85, digits=4))


def _batches(loader: Any, count: int | None = None) -> list[tuple[bytes, list[int], list[str]]]:
    out = []
    for b in loader:
        out.append((b["jpg"].numpy().tobytes(), b["cls"].tolist(), list(b["__key__"])))
        if count is not None and len(out) == count:
            break
    return out


def _loader(root: Path, parts: bool, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> Any:
    # the measured cost decides whether to split: a tiny part time splits these cheap 16x24
    # images (4 parts of 2 rows), a huge one keeps every batch whole
    monkeypatch.setattr(split, "PART_S", 1e-9 if parts else 1e9)
    return feedline.Loader(os.fspath(root), batch_size=8, workers=2, seed=3, drop_last=False, **kw)


def test_part_rows_from_the_measured_cost() -> None:
    assert split.part_rows(650e-6, 64, 2) == 16  # W1: 4 parts of 16 JPEGs
    assert split.part_rows(3e-6, 256, 2) == 0  # W3: 256 raw rows in under a millisecond
    assert split.part_rows(650e-6, 64, 1) == 0  # one worker: nothing to share
    assert split.part_rows(1.0, 8, 2) == 2  # at most 2 parts per worker: 4 of 2 rows


@pytest.mark.timeout(120)
def test_split_batches_are_byte_identical_and_resume_exactly(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    root = _pack(tmp_path, 37)  # 5 batches of 8 and a short one of 5
    with _loader(root, False, monkeypatch) as whole:
        want = []
        for epoch in (0, 1):
            whole.set_epoch(epoch)
            want.append(_batches(whole))
        assert whole.stats["part_rows"] == 0
    with _loader(root, True, monkeypatch) as parted:
        got = []
        for epoch in (0, 1):
            parted.set_epoch(epoch)
            got.append(_batches(parted))
        assert parted.stats["part_rows"] == 2 and parted.stats["batches"] == 10
    assert got == want
    assert [len(b[1]) for b in got[0]] == [8, 8, 8, 8, 5]
    # stop after 2 batches of epoch 1, resume in a new loader: the rest, exactly once
    with _loader(root, True, monkeypatch) as first:
        first.set_epoch(1)
        head = _batches(first, 2)
        saved = first.state_dict()
    with _loader(root, True, monkeypatch) as second:
        second.load_state_dict(saved)
        second.set_epoch(1)
        tail = _batches(second)
    assert head + tail == want[1]
    assert sorted(i for b in head + tail for i in b[1]) == list(range(37))


@pytest.mark.timeout(120)
def test_a_part_that_fails_redoes_the_whole_batch_per_sample(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    root = _pack(tmp_path, 24, bad=13)  # batch 1 of an unshuffled epoch
    runs = {}
    for parts in (False, True):
        with _loader(root, parts, monkeypatch, shuffle=False, on_error="skip") as loader:
            with pytest.warns(SkippedSampleWarning, match="s0013"):
                runs[parts] = _batches(loader)
            assert loader.stats["skipped"] == 1
            assert loader.stats["part_rows"] == (2 if parts else 0)
            assert [s["key"] for s in loader.stats["skipped_samples"]] == ["s0013"]
    assert runs[True] == runs[False]
    assert 13 not in [i for b in runs[True] for i in b[1]]
    with _loader(root, True, monkeypatch, shuffle=False) as loader, \
            pytest.raises(WorkerError) as info:
        _batches(loader)
    assert info.value.place["key"] == "s0013" and info.value.place["stage"] == "decode"
