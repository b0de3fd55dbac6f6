"""``feedline.wrap(dataloader, device=...)``: copy-stream prefetch for an existing loader.

Any iterable of batches (typically a ``torch.utils.data.DataLoader``) keeps
its workers and collate; ``wrap`` adds what ``pin_memory=True`` alone does not
give (seed 000, "pin_memory=True is not overlap"): every tensor leaf of each
batch (dicts, lists, tuples, namedtuples, dataclasses, objects with
``pin_memory()``/``to()``) is pinned if needed and copied with
``non_blocking=True`` on a dedicated CUDA stream, ``prefetch`` batches ahead;
the consumer's stream waits on each copy's event and device tensors are
protected with ``record_stream``. On ``device="cpu"`` batches pass through.

``device`` defaults to ``"cuda"`` (the current CUDA device) when CUDA is
available and ``"cpu"`` otherwise, so the same script runs on both. The module
is named ``wrapping`` (not ``wrap``) so that importing it can never shadow the
function ``feedline.pipeline.wrap`` / ``feedline.wrap``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from feedline.pipeline import nested
from feedline.pipeline.slots import Fence
from feedline.pipeline.transfer import CpuEngine, make_engine


class Wrapped:
    """An iterable over ``loader`` whose batches arrive on ``device``.

    Args:
        loader: any iterable of batches.
        device: ``"cpu"``, ``"cuda"`` or ``"cuda:N"``; ``None`` (default):
            :func:`default_device`.
        prefetch: batches copied ahead of the consumer (>= 1).

    Raises:
        ValueError: ``prefetch`` is not an integer >= 1, or ``device`` is not a device.
        DeviceError: a CUDA device was asked for and CUDA is not available.
    """

    def __init__(self, loader: Iterable[Any], device: Any = None, prefetch: int = 2) -> None:
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1:
            raise ValueError(f"prefetch must be an integer >= 1, got {prefetch!r}")
        self.loader = loader
        self.engine = make_engine(default_device() if device is None else device)
        self.device: torch.device = self.engine.device
        self.prefetch = prefetch

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        # sampler, dataset, batch_size... of the wrapped loader
        if name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)

    def __iter__(self) -> Iterator[Any]:
        if isinstance(self.engine, CpuEngine):
            yield from self.loader
            return
        queue: deque[tuple[Any, Fence | None]] = deque()
        source = iter(self.loader)
        exhausted = False
        while True:
            while not exhausted and len(queue) < self.prefetch + 1:
                try:
                    batch = next(source)
                except StopIteration:
                    exhausted = True
                    break
                queue.append(self.engine.send(nested.pin(batch)))
            if not queue:
                return
            tree, fence = queue.popleft()
            yield self.engine.accept(tree, fence)


def default_device() -> str:
    """``"cuda"`` when torch sees a CUDA device, else ``"cpu"``."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def wrap(loader: Iterable[Any], device: Any = None, prefetch: int = 2) -> Wrapped:
    """Add copy-stream prefetch to ``loader`` (see :class:`Wrapped`).

    ``device=None`` picks :func:`default_device`. Call it as often as you like:
    each call returns a new, independent :class:`Wrapped`.
    """
    return Wrapped(loader, device, prefetch)
