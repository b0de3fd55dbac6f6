"""Decode-ahead: a decode after delivery (decode_on) runs while the consumer computes.

The CPU path of the interface (a CpuJpegDecoder given as decode_on) runs the same plumbing
as a GPU decoder: when batch N is delivered, batch N+1's decode starts on one background
thread, so next() finds it decoded. tests/gpu/pipeline_device_decode_test.py covers CUDA.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from loader_helpers import pack_jpegs

import feedline
from feedline import spans
from feedline.decode.jpeg_batch import CpuJpegDecoder
from feedline.errors import DecodeError


def _dataset(tmp: Path, n: int = 24, truncated: int | None = None) -> str:
    """``truncated``: that sample's JPEG is cut in half: its header reads (the workers keep
    it), its body does not decode (found only after delivery)."""
    return pack_jpegs(tmp, n, (24, 32), cut=truncated)


class _Watched(CpuJpegDecoder):
    """The CPU decoder, telling which thread decodes each batch and when a decode starts."""

    def __init__(self) -> None:
        super().__init__()
        self.started = threading.Semaphore(0)
        self.callers: list[int] = []

    def decode(self, batch: Any, *, size: tuple[int, int] | None = None) -> Any:
        self.callers.append(threading.get_ident())
        self.started.release()
        return super().decode(batch, size=size)


def _decode_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "feedline-decode-ahead"]


class _Sink:
    def __init__(self) -> None:
        self.spans: list[tuple[str, float, float, dict[str, Any]]] = []
        self._lock = threading.Lock()

    def record(self, stage: str, start: float, end: float, attrs: dict[str, Any]) -> None:
        with self._lock:
            self.spans.append((stage, start, end, dict(attrs)))


def test_the_next_batch_decodes_during_the_consumers_step(tmp_path):
    """During step N the decode of batch N+1 starts (the step waits for that start: without
    decode-ahead it comes only at the next next(), and the wait times out)."""
    ds = _dataset(tmp_path)
    dec = _Watched()
    sink = _Sink()
    spans.install(sink)
    try:
        with feedline.Loader(ds, batch_size=4, workers=2, shuffle=False, decode_on=dec) as loader:
            got, started = [], 0
            for i, b in enumerate(loader):
                got += [int(c) for c in b["cls"]]
                assert all(img.shape == (24, 32, 3) for img in b["jpg"])
                if i < 5:  # the step: batch i+1's decode has begun meanwhile
                    while started < i + 2:
                        assert dec.started.acquire(timeout=30), f"batch {i + 1} not decoding ahead"
                        started += 1
            consumer = threading.get_ident()
            info = loader.stats["decode_on"]
    finally:
        spans.uninstall(sink)
    assert got == list(range(24))
    assert info["batches"] == 6 and info["decoded_ahead"] == 5, info
    assert dec.callers[0] == consumer and consumer not in dec.callers[1:]
    assert not _decode_threads()  # close() stopped it
    # diagnose still sees the decode: a decode span per batch, from the decode-ahead thread
    decodes = [s for s in sink.spans if s[0] == "decode" and s[3].get("after_delivery")]
    run = decodes[0][3]["run"]  # the pass's (the next epoch's first batch may follow)
    assert sorted(s[3]["batch"] for s in decodes if s[3]["run"] == run) == list(range(6))
    assert all(s[3]["cpu"] >= 0 and s[3]["owner"] == id(loader) for s in decodes[1:])
    assert len([s for s in sink.spans if s[0] == "device_decode"]) == 6


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_resume_counts_delivered_batches_only(tmp_path, worker_type):
    """Batch 3 is decoding ahead when the state is taken after batch 2: it is not counted,
    and a resumed loader delivers it (order and images as an uninterrupted pass). Process
    workers hand their batches over on another thread: the decode ahead starts there."""
    ds = _dataset(tmp_path)
    kw = {"batch_size": 4, "workers": 2, "seed": 7, "worker_type": worker_type}
    with feedline.Loader(ds, decode_on=CpuJpegDecoder(threads=2), **kw) as full:
        want = [(int(c), img.clone()) for b in full for c, img in zip(b["cls"], b["jpg"], strict=True)]
    with feedline.Loader(ds, decode_on=CpuJpegDecoder(), **kw) as first:
        it = iter(first)
        head = [(int(c), img) for _ in range(3) for b in [next(it)]
                for c, img in zip(b["cls"], b["jpg"], strict=True)]
        state = first.state_dict()
        assert first.stats["decode_on"]["batches"] == 3
        assert first.stats["decode_on"]["decoded_ahead"] == 2
    with feedline.Loader(ds, decode_on=CpuJpegDecoder(), **kw) as again:
        again.load_state_dict(state)
        tail = [(int(c), img) for b in again for c, img in zip(b["cls"], b["jpg"], strict=True)]
    got = head + tail
    assert [c for c, _ in got] == [c for c, _ in want]
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(got, want, strict=True))


def test_a_bad_image_fails_at_its_own_batch(tmp_path):
    """Sample 13 (batch 3) is decoded ahead during batch 2's step; its error is raised by the
    next() that hands out batch 3, naming the key, after batches 0-2 arrived whole."""
    ds = _dataset(tmp_path, truncated=13)
    with feedline.Loader(ds, batch_size=4, workers=2, shuffle=False,
                         decode_on=CpuJpegDecoder()) as loader:
        it = iter(loader)
        got = [int(c) for _ in range(3) for c in next(it)["cls"]]
        with pytest.raises(DecodeError) as e:
            next(it)
        info = loader.stats["decode_on"]
    assert got == list(range(12))
    assert e.value.key is not None and "s013" in e.value.key and "undecodable" in str(e.value)
    assert info["batches"] == 3


def test_a_pass_given_up_mid_epoch_and_close_leave_nothing_running(tmp_path):
    """Leaving a pass with batch 3 decoding ahead, the next pass resumes at batch 3 (delivered
    from a decode of its own, in order); close() stops the decode-ahead thread."""
    ds = _dataset(tmp_path)
    with feedline.Loader(ds, batch_size=4, workers=2, shuffle=False,
                         decode_on=CpuJpegDecoder()) as loader:
        for i, _ in enumerate(loader):
            if i == 2:
                break
        assert len(_decode_threads()) == 1
        again = [int(c) for b in loader for c in b["cls"]]
        # a third pass abandoned right after its first batch, then closed with it in flight
        next(iter(loader))
    assert again == list(range(12, 24))
    assert not _decode_threads()


def test_the_next_epochs_first_batch_decodes_during_the_last_step(tmp_path):
    """After an epoch's last batch, the next epoch's first (prepared ahead by the workers)
    decodes during the last step and is used when that epoch's pass adopts it."""
    ds = _dataset(tmp_path)
    with feedline.Loader(ds, batch_size=4, workers=2, seed=1,
                         decode_on=CpuJpegDecoder()) as loader, \
            feedline.Loader(ds, batch_size=4, workers=2, seed=1) as ref:
        got, want = [], []
        for epoch in range(3):
            loader.set_epoch(epoch)
            ref.set_epoch(epoch)
            got += [(int(c), img) for b in loader for c, img in zip(b["cls"], b["jpg"], strict=True)]
            want += [(int(c), img) for b in ref for c, img in zip(b["cls"], b["jpg"], strict=True)]
        info = loader.stats["decode_on"]
    assert info["batches"] == 18 and info["decoded_ahead"] == 17, info
    assert [c for c, _ in got] == [c for c, _ in want]
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(got, want, strict=True))
