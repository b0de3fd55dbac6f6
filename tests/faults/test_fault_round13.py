"""Round 13 of hostile inputs (issue 13): tar oddities in adopted shards, an object store
that lies, checkpoints killed or starved mid-save, foreign resume state, a hostile
environment, and Ctrl-C as a CPU process-worker batch or a dropped loader dies
(``sweep_round13.py``, run by ``hostile_sweep.py``). A quick test for each failure the
round found or closed."""

from __future__ import annotations

import io
import os
import select
import sys
import threading
import types
import weakref
from pathlib import Path

import numpy as np
import pytest
import torch  # noqa: F401 - imported at collection: the lent tensors are torch's
from faults_helpers import Numbers

import feedline
from feedline.pipeline import _dropped
from feedline.pipeline.arena_loans import Loans


@pytest.mark.timeout(30)
def test_a_lent_arena_slot_comes_back_through_a_c_level_callback() -> None:
    """Before: the slot came back through ``weakref.finalize`` (Python code run where the
    batch died), where a Ctrl-C that arrived just then was printed as "Exception ignored"
    and lost (2 of 30 in a loop over process workers)."""
    loans = Loans(count=4, keep_free=2)
    try:
        assert loans.take(1)
        tensors = loans.lend(1, {("x",): np.arange(8, dtype=np.float32)})
        (ref, slot), = loans._deaths._refs.values()
        assert slot == 1 and isinstance(ref.__callback__, types.BuiltinMethodType)  # SimpleQueue.put
        view = tensors[("x",)][2:]  # a view keeps the slot lent
        del tensors
        assert not select.select([loans.fileno()], [], [], 0.2)[0] and loans.returned() == []
        del view
        assert select.select([loans.fileno()], [], [], 10)[0], "the reader was not woken"
        assert loans.returned() == [1] and loans.lent == set()
    finally:
        loans.close()
    assert loans._deaths._thread is not None and not loans._deaths._thread.is_alive()


@pytest.mark.timeout(60)
def test_a_dropped_loader_is_closed_off_the_training_thread() -> None:
    """Before: a ``weakref.finalize`` closed it in the thread that dropped it, and a Ctrl-C
    that arrived during the loader's teardown was raised at the finalizer's first line and
    lost (8 of 200 in a loop making and dropping a loader per pass)."""
    loader = feedline.Loader(Numbers(64), batch_size=4, workers=2, seed=1)
    it = iter(loader)
    next(it)
    callbacks = [r.__callback__ for r in weakref.getweakrefs(loader)]
    assert callbacks and all(isinstance(c, types.BuiltinMethodType) for c in callbacks), callbacks
    workers = [t for t in threading.enumerate() if t.name.startswith("feedline-worker_")]
    assert workers
    del it, loader
    assert _dropped.settle(30)
    assert not [t for t in workers if t.is_alive()]


@pytest.mark.timeout(30)
def test_the_cli_escapes_what_stdout_cannot_encode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: with PYTHONIOENCODING=ascii (or a POSIX locale), ``feedline pack`` into a
    non-ASCII folder packed it, then ended in a UnicodeEncodeError traceback (exit 1)."""
    from feedline.cli.main import main

    src = tmp_path / "src"
    src.mkdir()
    for i in range(3):
        (src / f"s{i}.bin").write_bytes(os.urandom(100))
    out = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    monkeypatch.setattr(sys, "stdout", out)
    try:
        main(["pack", str(src), "--out", str(tmp_path / "d\u00e9st")])
    except SystemExit as e:
        assert not e.code, e
    out.flush()
    assert b"d\\xe9st" in out.buffer.getvalue()  # type: ignore[attr-defined]
    assert len(feedline.open_dataset(tmp_path / "d\u00e9st")) == 3
