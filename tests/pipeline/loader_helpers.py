"""Helpers for loader tests: small picklable map-style datasets and a real packed dataset."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import numpy as np
import simplejpeg


class Numbers:
    """Sample i: {"x": float32[4] filled with i, "y": i, "name": "s<i>"}; picklable."""

    def __init__(self, n: int = 64) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"x": np.full((4,), i, np.float32), "y": i, "name": f"s{i}"}


class Failing(Numbers):
    """Like Numbers, but sample indices in ``bad`` raise KeyError."""

    def __init__(self, n: int, bad: set[int]) -> None:
        super().__init__(n)
        self.bad = bad

    def __getitem__(self, i: int) -> dict[str, Any]:
        if i in self.bad:
            raise KeyError(f"sample {i} is broken")
        return super().__getitem__(i)


def batch_ids(batch: dict[str, Any]) -> list[int]:
    """The sample ids of a Numbers batch, checked against the payload."""
    ids = batch["y"].tolist()
    assert batch["x"][:, 0].tolist() == [float(i) for i in ids]
    assert batch["name"] == [f"s{i}" for i in ids]
    return [int(i) for i in ids]


def make_packed(root: Path, n: int = 40, size: tuple[int, int] = (24, 32)) -> Path:
    """Pack n samples (jpg, cls, npy, f32) with feedline.format.pack; returns the folder."""
    from feedline.format import pack

    src = root / "src"
    src.mkdir(parents=True)
    for i in range(n):
        img = np.random.default_rng(i).integers(0, 255, (*size, 3), dtype=np.uint8)
        (src / f"s{i:04d}.jpg").write_bytes(simplejpeg.encode_jpeg(img))
        (src / f"s{i:04d}.cls").write_text(str(i))
        buf = io.BytesIO()
        np.save(buf, np.full((3,), i, np.int32))
        (src / f"s{i:04d}.npy").write_bytes(buf.getvalue())
        (src / f"s{i:04d}.f32").write_bytes(np.full(4, i, np.float32).tobytes())
    pack([os.fspath(src)], os.fspath(root / "ds"))
    return root / "ds"


def pack_jpegs(root: Path, n: int, size: tuple[int, int], *, cut: int | None = None,
               quality: int = 90, digits: int = 3) -> str:
    """Pack n random JPEGs of ``size`` with their index as ``.cls``; sample ``cut``'s JPEG is
    cut in half: its header reads, its body does not decode. Returns the dataset folder."""
    from feedline.format import pack

    src = root / "src"
    src.mkdir(parents=True)
    for i in range(n):
        img = np.random.default_rng(i).integers(0, 255, (*size, 3), dtype=np.uint8)
        data = simplejpeg.encode_jpeg(img, quality=quality)
        (src / f"s{i:0{digits}d}.jpg").write_bytes(data[: len(data) // 2] if i == cut else data)
        (src / f"s{i:0{digits}d}.cls").write_text(str(i))
    pack([os.fspath(src)], os.fspath(root / "ds"))
    return os.fspath(root / "ds")


def fail_on(sample: dict[str, Any], bad: int) -> dict[str, Any]:
    """A transform that raises ZeroDivisionError on sample ``bad`` (picklable via partial)."""
    if sample["y"] == bad:
        return {"x": 1 / 0}
    return sample


def report_pid_and_hang(sample: dict[str, Any], queue: Any) -> dict[str, Any]:
    """In a worker process: tell the test its pid, then hang (the simulated stuck decode;
    the loader's close() terminates it). In the parent (the probe batch) it does nothing."""
    import multiprocessing
    import os
    import time

    if multiprocessing.parent_process() is not None:
        queue.put(os.getpid())
        time.sleep(60)
    return sample


def hang_past(sample: dict[str, Any], first: int) -> dict[str, Any]:
    """Samples ``y >= first`` hang (a stuck decode that close() must terminate)."""
    import time

    if sample["y"] >= first:
        time.sleep(60)
    return sample


class Huge:
    """Samples of ``size`` zero bytes (calloc: no page is touched until written)."""

    def __init__(self, n: int, size: int) -> None:
        self.n, self.size = n, size

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> np.ndarray:
        return np.zeros(self.size, np.uint8)


def flat(lists: Any) -> list[int]:
    """Concatenate lists of ids."""
    return [i for part in lists for i in part]


def _in_worker_process() -> bool:
    import multiprocessing

    return multiprocessing.parent_process() is not None


def crash_in_worker(sample: dict[str, Any], how: str) -> dict[str, Any]:
    """A transform that, in a worker process only, segfaults (``how="segv"``), calls
    ``os._exit(3)`` (``"exit"``) or hangs (``"hang"``); in the training process it does
    nothing, so a probe run there would pass and the test expecting the fault fails."""
    if _in_worker_process():
        if how == "segv":
            import ctypes

            ctypes.string_at(0)
        elif how == "exit":
            os._exit(3)
        elif how == "hang":
            import time

            time.sleep(300)
    return sample


def with_lock(sample: dict[str, Any]) -> dict[str, Any]:
    """A transform adding a value that cannot be pickled (a lock) as field ``handle``."""
    import threading

    return {**sample, "handle": threading.Lock()}


class Photos:
    """Map-style: sample i is a uint8 image, landscape (240, 320, 3) or, for 5% of the
    indices (a fixed pseudo-random choice), portrait (320, 240, 3); plus its label.
    ``scale`` divides both sides (10: 24x32 landscape, 32x24 portrait)."""

    def __init__(self, n: int = 200, scale: int = 1) -> None:
        self.n, self.scale = n, scale
        rng = np.random.default_rng(1234)
        self.portrait = set(rng.choice(n, size=max(1, n // 20), replace=False).tolist())

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        h, w = 240 // self.scale, 320 // self.scale
        shape = (w, h, 3) if i in self.portrait else (h, w, 3)
        return {"image": np.full(shape, i % 251, np.uint8), "label": i}


class Busy(Numbers):
    """Like Numbers, with ``work`` iterations of pure-Python arithmetic per sample (holds
    the GIL: the case process workers are for)."""

    def __init__(self, n: int = 64, work: int = 20_000) -> None:
        super().__init__(n)
        self.work = work

    def __getitem__(self, i: int) -> dict[str, Any]:
        acc = 0
        for k in range(self.work):
            acc += k * k % 7
        return {**super().__getitem__(i), "acc": acc}


class Doubled:
    """A per-sample stage (``feedline.pipeline.stages.Stage``): ``x`` doubled into ``x2``,
    and samples whose ``y`` is in ``reject`` refused (a filter)."""

    name = "double"

    def __init__(self, reject: frozenset[int] = frozenset()) -> None:
        self.reject = reject

    def __call__(self, sample: dict[str, Any], place: Any) -> dict[str, Any]:
        if sample["y"] in self.reject:
            raise ValueError(f"sample {place.item.key} refused")
        return {**sample, "x2": sample["x"] * 2}
