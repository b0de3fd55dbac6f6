"""feedline.pipeline: the loader.

``Loader`` composes sampling (``sampler``), the worker pool (``workers_thread``
/ ``workers_process``, started by ``forking`` where fork is safe, else by the
``forkserver``; ``main_script`` says when the script cannot start them), collate into
slots (``collate``, ``slots``) and the
transfer engine (``transfer``); ``wrap`` adds copy-stream prefetch to an
existing ``torch.utils.data.DataLoader``. Names load lazily so that process
workers importing this package do not import torch unless they need it.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {"Loader": "feedline.pipeline.loader", "wrap": "feedline.pipeline.wrapping",
         "Wrapped": "feedline.pipeline.wrapping"}

__all__ = ["Loader", "Wrapped", "wrap"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'feedline.pipeline' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
