"""Fixtures for loader tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from loader_helpers import make_packed


@pytest.fixture
def packed(tmp_path: Path) -> Path:
    """A real packed dataset of 40 samples (jpg, cls, npy, f32), keys s0000..s0039."""
    return make_packed(tmp_path)
