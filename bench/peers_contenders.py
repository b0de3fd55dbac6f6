"""The contenders of bench/peers.py, each as a small runner (not a benchmark itself).

A runner is built inside its own child process (see ``peers.py``), gives one
iterable of batches per epoch, and is closed at the end. Every contender uses the
same number of workers, the same decoder (simplejpeg for JPEG, ``np.load`` for
``.npy``, ``np.frombuffer`` for raw ``.f32``, ``int`` for ``.cls``) and shuffles.
A batch is ``(images_or_arrays, labels)`` stacked by torch's ``default_collate``
(feedline gives its dict of tensors).

Peers live in ``.peers/`` (``scripts/install_peers.sh``); :func:`missing` says which
are not installed, so they are reported as such rather than dropped.
"""

from __future__ import annotations

import gc
import importlib.util
import io
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from peers_data import Workload, import_streaming

# contender name -> the modules it needs (checked without importing them)
REQUIRES: dict[str, tuple[str, ...]] = {
    "feedline Loader (threads)": (),
    "feedline Loader (processes)": (),
    "feedline Loader (auto)": (),
    "torch DataLoader (files)": (),
    "torch DataLoader (ds[i])": (),
    "torchdata.nodes": ("torchdata",),
    "SPDL": ("spdl",),
    "WebDataset": ("webdataset",),
    "MosaicML Streaming": ("streaming", "transformers"),
    "LitData": ("litdata",),
}
FEEDLINE = ("feedline Loader (threads)", "feedline Loader (processes)", "feedline Loader (auto)")
DATALOADERS = ("torch DataLoader (files)", "torch DataLoader (ds[i])")


def add_peers_path(peers_dir: str | None) -> None:
    """Append the peers' install folder to ``sys.path`` (after .venv: its torch wins)."""
    if peers_dir and Path(peers_dir).is_dir() and peers_dir not in sys.path:
        sys.path.append(peers_dir)


def missing(name: str) -> str | None:
    """Why contender ``name`` cannot run here (``None`` when it can)."""
    absent = [m for m in REQUIRES[name] if importlib.util.find_spec(m) is None]
    if absent:
        return f"not installed ({', '.join(absent)}; run scripts/install_peers.sh)"
    return None


# --- the one decoder every contender uses ------------------------------------------

def decode(field: str, data: Any) -> np.ndarray:
    """One sample's bytes (or memoryview) to its array."""
    if field == "jpg":
        import simplejpeg

        return simplejpeg.decode_jpeg(data, colorspace="RGB")
    if field == "npy":
        return np.load(io.BytesIO(data), allow_pickle=False)
    return np.frombuffer(data, np.float32).copy()


def label(data: Any) -> int:
    return int(bytes(data))


def _sample(w: Workload, x: np.ndarray, y: int | None) -> Any:
    import torch

    t = torch.from_numpy(x)
    return (t, y) if w.label else t


class FileSamples:
    """Map-style dataset over the original files (the usual PyTorch set-up)."""

    def __init__(self, w: Workload, src: Path) -> None:
        self.w, self.src = w, str(src)

    def __len__(self) -> int:
        return self.w.n

    def __getitem__(self, i: int) -> Any:
        stem = f"{self.src}/{i:08d}"
        if self.w.field == "npy":
            x = np.load(f"{stem}.npy", allow_pickle=False)
        else:
            with open(f"{stem}.{self.w.field}", "rb") as f:
                x = decode(self.w.field, f.read())
        y = None
        if self.w.label:
            with open(f"{stem}.cls", "rb") as f:
                y = label(f.read())
        return _sample(self.w, x, y)


class PackedSamples:
    """Map-style dataset calling ``ds[i]`` on the packed shards (opened lazily per worker)."""

    def __init__(self, w: Workload, root: Path) -> None:
        self.w, self.root, self._ds = w, str(root), None

    def __len__(self) -> int:
        return self.w.n

    def __getitem__(self, i: int) -> Any:
        if self._ds is None:
            import feedline

            self._ds = feedline.open_dataset(self.root)
        s = self._ds[i]
        return _sample(self.w, decode(self.w.field, s[self.w.field]),
                       label(s["cls"]) if self.w.label else None)


@dataclass
class Runner:
    """``epoch(e)`` -> batches of one shuffled pass; ``close()`` stops workers."""

    epoch: Callable[[int], Iterable[Any]]
    close: Callable[[], None] = lambda: None
    note: str = ""


def batch_len(batch: Any) -> int:
    """Samples in one batch of any contender."""
    if isinstance(batch, dict):
        return int(next(v for k, v in batch.items() if k != "__key__").shape[0])
    if isinstance(batch, (tuple, list)):
        return int(batch[0].shape[0])
    return int(batch.shape[0])


def _feedline(w: Workload, root: Path, workers: int, kind: str) -> Runner:
    import feedline

    loader = feedline.Loader(str(root / "ds"), batch_size=w.batch, workers=workers,
                             worker_type=kind, drop_last=False, seed=0)

    def epoch(e: int) -> Iterable[Any]:
        loader.set_epoch(e)
        return loader

    return Runner(epoch, loader.close)


def _dataloader(dataset: Any, batch: int | None, workers: int, **kw: Any) -> Runner:
    from torch.utils.data import DataLoader

    dl = DataLoader(dataset, batch_size=batch, num_workers=workers,
                    persistent_workers=workers > 0, **kw)
    return Runner(lambda e: dl)


def _torchdata(w: Workload, root: Path, workers: int) -> Runner:
    import torch
    from torch.utils.data import RandomSampler, default_collate
    from torchdata.nodes import Batcher, Loader, Mapper, ParallelMapper, Prefetcher, SamplerWrapper

    ds = PackedSamples(w, root / "ds")
    sampler = RandomSampler(range(w.n), generator=torch.Generator().manual_seed(0))
    node: Any = SamplerWrapper(sampler)
    node = ParallelMapper(node, map_fn=ds.__getitem__, num_workers=workers, method="thread",
                          in_order=True)
    node = Batcher(node, batch_size=w.batch, drop_last=False)
    node = Mapper(node, default_collate)
    held = [Loader(Prefetcher(node, prefetch_factor=2))]
    del node

    def close() -> None:
        """Drop the nodes so their iterators shut their threads down now (in ``__del__``):
        left to interpreter teardown, a mapper thread still inside torch could end the
        process in ``std::terminate`` (seen on W4), after its figures were printed."""
        held.clear()
        gc.collect()

    return Runner(lambda e: held[0], close)


def _spdl(w: Workload, root: Path, workers: int) -> Runner:
    """SPDL in its batch idiom: the source yields index batches, ``workers`` concurrent
    tasks each read, decode and collate one batch. (A per-sample ``pipe`` + ``aggregate``
    ran at about 2,000 items/s here even for a no-op stage: each item crosses threads.)"""
    from spdl.pipeline import PipelineBuilder
    from torch.utils.data import default_collate

    ds = PackedSamples(w, root / "ds")

    def load(indices: list[int]) -> Any:
        return default_collate([ds[i] for i in indices])

    def epoch(e: int) -> Iterable[Any]:
        order = np.random.default_rng(e).permutation(w.n).tolist()
        batches = [order[i : i + w.batch] for i in range(0, w.n, w.batch)]
        pipeline = (PipelineBuilder().add_source(batches)
                    .pipe(load, concurrency=workers, output_order="input")
                    .add_sink(3).build(num_threads=workers))

        def run() -> Iterable[Any]:
            with pipeline.auto_stop():
                yield from pipeline.get_iterator(timeout=600)

        return run()

    return Runner(epoch)


class _WdsDecode:
    def __init__(self, w: Workload) -> None:
        self.w = w

    def __call__(self, s: dict[str, Any]) -> Any:
        return _sample(self.w, decode(self.w.field, s[self.w.field]),
                       label(s["cls"]) if self.w.label else None)


def _webdataset(w: Workload, root: Path, workers: int) -> Runner:
    import webdataset as wds
    from torch.utils.data import default_collate

    tars = sorted(str(p) for p in (root / "ds").glob("*.tar"))
    pipe = (wds.WebDataset(tars, shardshuffle=False, empty_check=False, nodesplitter=None)
            .shuffle(1000).map(_WdsDecode(w)).batched(w.batch, collation_fn=default_collate))
    return _dataloader(pipe, None, min(workers, len(tars)))


def _streaming(w: Workload, root: Path, workers: int) -> Runner:
    note = import_streaming()
    from streaming import StreamingDataset
    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()

    class Samples(StreamingDataset):  # type: ignore[misc]
        def __getitem__(self, i: int) -> Any:
            s = super().__getitem__(i)
            x = decode("jpg", s["x"]) if w.field == "jpg" else s["x"]
            return _sample(w, x, int(s["cls"]) if w.label else None)

    ds = Samples(local=str(root / "mds"), shuffle=True, shuffle_seed=0, batch_size=w.batch)
    runner = _dataloader(ds, w.batch, workers)
    runner.note = note or ""
    return runner


def _litdata(w: Workload, root: Path, workers: int) -> Runner:
    from litdata import StreamingDataLoader, StreamingDataset

    class Samples(StreamingDataset):  # type: ignore[misc]
        def __getitem__(self, i: Any) -> Any:
            s = super().__getitem__(i)
            x = decode("jpg", s["x"]) if w.field == "jpg" else s["x"]
            return _sample(w, x, int(s["cls"]) if w.label else None)

    ds = Samples(input_dir=str(root / "lit"), shuffle=True, seed=0)
    dl = StreamingDataLoader(ds, batch_size=w.batch, num_workers=workers, persistent_workers=True)
    return Runner(lambda e: dl)


def make(name: str, w: Workload, root: Path, workers: int) -> Runner:
    """Build contender ``name`` over workload ``w`` generated under ``root``."""
    if name == "feedline Loader (threads)":
        return _feedline(w, root, workers, "thread")
    if name == "feedline Loader (processes)":
        return _feedline(w, root, workers, "process")
    if name == "feedline Loader (auto)":
        return _feedline(w, root, workers, "auto")
    if name == "torch DataLoader (files)":
        return _dataloader(FileSamples(w, root / "src"), w.batch, workers, shuffle=True)
    if name == "torch DataLoader (ds[i])":
        return _dataloader(PackedSamples(w, root / "ds"), w.batch, workers, shuffle=True)
    builders = {"torchdata.nodes": _torchdata, "SPDL": _spdl, "WebDataset": _webdataset,
                "MosaicML Streaming": _streaming, "LitData": _litdata}
    return builders[name](w, root, workers)
