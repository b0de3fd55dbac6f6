"""feedline: keep accelerators fed during training.

The top-level names load their package on first use, so ``import feedline``
is cheap and never imports torch or touches CUDA. A resolved name is kept in
this module's namespace, so later lookups return the same object and never go
through the import system again (no submodule can shadow it).

``feedline.vision`` (uint8 image helpers for ``transform=``),
``feedline.audio`` (WAV decode and fixed-size clips),
``feedline.text`` (documents to token blocks for language-model pretraining),
``feedline.padding`` (a collate that pads varying-length fields per batch),
``feedline.table`` (targets and CV folds from a packed table's columns),
``feedline.patches`` (random patches of N-D arrays: 3D volumes and masks),
``feedline.episodes`` (recorded robot/driving episodes as training windows) and
``feedline.checkpoint`` are submodules, loaded on first use as well
(``feedline.vision.ImageTransform`` works after ``import feedline``).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "open_dataset": "feedline.io",
    "Loader": "feedline.pipeline",
    "wrap": "feedline.pipeline",
    "watch": "feedline.observe",
    "FeedlineError": "feedline.errors",
    "DatasetWriter": "feedline.format",
    "pack_samples": "feedline.format",
}

_SUBMODULES = ("vision", "audio", "checkpoint", "episodes", "text", "padding", "table", "patches")

__all__ = ["DatasetWriter", "FeedlineError", "Loader", "__version__", "open_dataset", "pack_samples", "watch", "wrap"]


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"feedline.{name}")  # binds itself here as it loads
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'feedline' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*__all__, *_SUBMODULES])
