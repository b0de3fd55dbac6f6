"""The shared-memory arena of process workers: closing it never fails while a view lives."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from feedline.pipeline import collate, shm


def test_an_arena_closed_while_a_view_lives_keeps_the_view_valid(tmp_path: Path) -> None:
    """A process pool closed by a finalizer while a view of its arena is still referenced
    (a traceback's frame, a kept array): no BufferError; the mapping goes with the view."""
    layout = collate.infer_layout([{"x": np.arange(4, dtype=np.int32)}], 2, 1)
    spec = shm.create(os.fspath(tmp_path), layout, 2)
    arena = shm.Arena(spec)
    try:
        view = arena.slot(1)[("x",)]
        view[:] = 7
        arena.close()
        assert view.tolist() == [[7] * 4, [7] * 4]
    finally:
        shm.release(spec)
