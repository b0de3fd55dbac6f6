"""The one place where the demo meets the rest of feedline.

The demo composes four public pieces: ``feedline.format.pack``,
``feedline.open_dataset`` + ``feedline.Loader``, ``feedline.watch`` and
``feedline.observe.write_html``. Each is reached through a function here, so
the rest of the demo never depends on their exact call shapes, and a missing
piece fails with one clear error naming it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from feedline.errors import FeedlineError


def _piece(module: str, name: str) -> Any:
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise FeedlineError(
            f"the demo needs {module}.{name}, which this installation lacks ({e})",
            stage="demo",
            fix="install a complete feedline (bash scripts/setup.sh)",
        ) from e


def pack(
    raw: Path, out: Path, *, shard_size: int, workers: int,
    progress: Callable[[int, int], None] | None = None,
) -> Any:
    """Pack the raw log folder ``raw`` into shards under ``out``; returns the manifest.

    ``progress(files_done, files_total)`` is called after each sample.
    """
    pack_fn = _piece("feedline.format", "pack")

    def report(p: Any) -> None:
        if progress is not None:
            progress(p.files_done, p.files_total)

    return pack_fn([raw], out, shard_size=shard_size, workers=workers, progress=report)


def feedline_loader(
    root: Path, *, batch_size: int, device: str, workers: int, seed: int
) -> Iterable[dict[str, Any]]:
    """``feedline.Loader`` over the packed dataset at ``root``, shuffled, threads."""
    open_dataset = _piece("feedline.io", "open_dataset")
    loader_cls = _piece("feedline.pipeline", "Loader")
    return loader_cls(
        open_dataset(root),
        batch_size=batch_size,
        device=device,
        shuffle=True,
        seed=seed,
        drop_last=True,
        workers=workers,
        worker_type="thread",
    )


def watch(iterable: Iterable[Any], *, device: str, batch_size: int, name: str) -> Any:
    """``feedline.watch`` around ``iterable``: an iterable with ``.report()``."""
    watch_fn: Callable[..., Any] = _piece("feedline.observe", "watch")
    return watch_fn(iterable, device=device, batch_size=batch_size, name=name)


def write_html(reports: list[Any], path: Path, headline: list[str] | None = None) -> None:
    """Both runs' reports (timelines, stage histograms) as one HTML file, with
    ``headline`` (plain-text lines: speedup, samples/s, host load) at the top."""
    _piece("feedline.observe", "write_html")(
        reports, path, title="feedline demo: the naive loader vs feedline.Loader",
        headline=headline or [])
