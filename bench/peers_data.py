"""The workloads of bench/peers.py and the formats each contender reads (not a benchmark).

Each workload is generated into its own folder:

* ``src/``: the original small files ``{i:08d}.{field}`` (+ ``{i:08d}.cls``), read by
  the torch DataLoader baseline;
* ``ds/``: the same files packed by ``feedline pack`` (plain tars + index), read by
  feedline, the ``ds[i]`` DataLoader, torchdata.nodes, SPDL and WebDataset (the tars);
* ``mds/``: MosaicML Streaming's own format (MDSWriter), only if it is installed;
* ``lit/``: LitData's own format (its BinaryWriter), only if it is installed.

In the peers' own formats JPEGs stay JPEG bytes (decoded by the same simplejpeg
call as every other contender) and arrays use the format's native array encoding,
so W2 (``.npy``) and W3 (raw ``.f32``) are the same data there.
"""

from __future__ import annotations

import io
import sys
import types
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Workload:
    """One generated dataset: ``n`` samples of one ``field`` (+ a ``.cls`` label)."""

    name: str
    n: int
    batch: int
    field: str              # "jpg", "npy" or "f32"
    shape: tuple[int, ...]  # decoded array shape (HxWx3 for JPEG)
    label: bool

    @property
    def sample_bytes(self) -> int:
        return int(np.prod(self.shape)) * (1 if self.field == "jpg" else 4)

    def describe(self) -> str:
        kind = {"jpg": "JPEG", "npy": ".npy float32", "f32": "raw .f32"}[self.field]
        size = f"{self.shape[0]}x{self.shape[1]}" if self.field == "jpg" else _human(self.sample_bytes)
        return f"{self.n:,} x {size} {kind}{' + .cls' if self.label else ''}, batch {self.batch}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Workload:
        return cls(**{**doc, "shape": tuple(doc["shape"])})


def _human(nbytes: int) -> str:
    return f"{nbytes >> 20} MB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KB"


def workloads(quick: bool) -> dict[str, Workload]:
    """W1-W4 of issue 10; ``quick`` shrinks them to seconds (smoke tests)."""
    big = (256, 1024) if quick else (1024, 1024)  # W4: 1 MB (quick) or 4 MB float32 arrays
    return {
        "W1": Workload("W1", 128 if quick else 4000, 64, "jpg", (256, 256, 3), True),
        "W2": Workload("W2", 2048 if quick else 50_000, 256, "npy", (1024,), True),
        "W3": Workload("W3", 2048 if quick else 50_000, 256, "f32", (1024,), True),
        "W4": Workload("W4", 12 if quick else 500, 8, "npy", big, False),
    }


def _arrays(w: Workload, seed: int = 0) -> Iterator[tuple[int, np.ndarray]]:
    """Deterministic sample arrays (a slice of one random pool, so generation is cheap)."""
    rng = np.random.default_rng(seed)
    if w.field == "jpg":
        y, x = np.mgrid[0 : w.shape[0], 0 : w.shape[1]]
        base = ((np.sin(x / 17.0) + np.cos(y / 23.0)) * 60 + 128)[..., None]
        for i in range(w.n):
            yield i, np.clip(base + rng.normal(0, 14, w.shape), 0, 255).astype(np.uint8)
        return
    size = int(np.prod(w.shape))
    pool = rng.standard_normal(size + 4096, dtype=np.float32)
    for i in range(w.n):
        start = (i * 7919) % 4096
        yield i, pool[start : start + size].reshape(w.shape)


def encode(w: Workload, arr: np.ndarray) -> bytes:
    """The bytes of one sample's file: JPEG (quality 90), ``.npy`` or raw float32."""
    if w.field == "jpg":
        import simplejpeg

        return bytes(simplejpeg.encode_jpeg(np.ascontiguousarray(arr), quality=90))
    if w.field == "npy":
        buf = io.BytesIO()
        np.save(buf, arr, allow_pickle=False)
        return buf.getvalue()
    return arr.tobytes()


def build(folder: Path, w: Workload, *, mds: bool, lit: bool) -> dict[str, Any]:
    """Write ``w`` under ``folder`` in every format asked for; returns facts about it."""
    from feedline.format import pack

    src = folder / "src"
    src.mkdir(parents=True)
    mds_writer, lit_writer = _peer_writers(folder, w, mds=mds, lit=lit)
    total = 0
    for i, arr in _arrays(w):
        data = encode(w, arr)
        total += len(data)
        (src / f"{i:08d}.{w.field}").write_bytes(data)
        label = i % 1000
        if w.label:
            (src / f"{i:08d}.cls").write_text(str(label))
        peer_value: Any = data if w.field == "jpg" else arr
        if mds_writer is not None:
            mds_writer.write({"x": peer_value, "cls": label})
        if lit_writer is not None:
            lit_writer[i] = {"x": peer_value, "cls": label}
    if mds_writer is not None:
        mds_writer.finish()
    if lit_writer is not None:
        lit_writer.done()
        lit_writer.merge()
    # at least 8 shards, so WebDataset's DataLoader workers (one shard at a time) all get work
    pack([str(src)], str(folder / "ds"), shard_size=max(1 << 20, total // 8), durable=False)
    return {"mean_sample_file_bytes": total // max(1, w.n), "total_bytes": total}


def import_streaming() -> str | None:
    """Import MosaicML Streaming; returns a note when torchvision had to be stood in for."""
    # transformers checks torchvision with find_spec: import what streaming uses first
    import transformers.feature_extraction_utils
    import transformers.tokenization_utils_base  # noqa: F401

    note = _torchvision_stand_in()
    import streaming  # noqa: F401

    return note


def _torchvision_stand_in() -> str | None:
    """MosaicML Streaming imports ``torchvision`` for its vision dataset classes only.
    PyPI's torchvision wheels are CUDA builds that do not load against torch+cpu; when
    the real one does not import, a stand-in with the two names imported is put in
    ``sys.modules`` (nothing on the measured path uses them). Returns a note, or None."""
    try:
        import torchvision  # noqa: F401

        return None
    except Exception as exc:
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:120]
    from torch.utils.data import Dataset

    class VisionDataset(Dataset):  # type: ignore[type-arg]
        def __init__(self, root: Any, transforms: Any = None, transform: Any = None,
                     target_transform: Any = None) -> None:
            self.root, self.transform, self.target_transform = root, transform, target_transform

    def to_tensor(pic: Any) -> Any:
        raise RuntimeError("torchvision stand-in: to_tensor is not available")

    mods = {name: types.ModuleType(name) for name in
            ("torchvision", "torchvision.datasets", "torchvision.transforms",
             "torchvision.transforms.functional")}
    mods["torchvision.datasets"].VisionDataset = VisionDataset  # type: ignore[attr-defined]
    mods["torchvision.transforms.functional"].to_tensor = to_tensor  # type: ignore[attr-defined]
    sys.modules.update(mods)
    return f"torchvision stand-in for streaming's import (real one: {reason})"


def _peer_writers(folder: Path, w: Workload, *, mds: bool, lit: bool) -> tuple[Any, Any]:
    mds_writer = lit_writer = None
    if mds:
        import_streaming()
        from streaming import MDSWriter

        x = "bytes" if w.field == "jpg" else f"ndarray:float32:{','.join(map(str, w.shape))}"
        mds_writer = MDSWriter(out=str(folder / "mds"), columns={"x": x, "cls": "int"},
                               size_limit=64 << 20)
    if lit:
        from litdata.streaming.writer import BinaryWriter

        lit_writer = BinaryWriter(str(folder / "lit"), chunk_bytes="64MB")
    return mds_writer, lit_writer
