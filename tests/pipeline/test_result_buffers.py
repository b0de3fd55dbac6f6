"""Big buffers of a process worker's custom-collate batches come back through reused shared
memory (:mod:`feedline.pipeline.result_buffers`), copied out before the segment is reused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import feedline
from feedline.pipeline import result_buffers


class Rows:
    def __len__(self) -> int:
        return 48

    def __getitem__(self, i: int) -> dict[str, int]:
        return {"i": i}


def big_collate(samples: list[dict[str, int]]) -> dict[str, object]:
    """3 MiB of float32 and 2 MiB of int16 per batch, each value its batch's first index."""
    first = samples[0]["i"]
    return {"audio": torch.full((4, 196_608), float(first)), "frames": np.full((4, 262_144), first, np.int16),
            "small": torch.tensor([s["i"] for s in samples])}


@pytest.mark.timeout(120)
def test_big_custom_batches_come_back_copied_out_of_reused_segments() -> None:
    # Before: each big tensor went in a new shared-memory file (torch's reducer, 16 ms of the
    # worker's CPU for 3 MB), and arrived shared; numpy arrays went through the pipe.
    loader = feedline.Loader(Rows(), batch_size=4, workers=2, worker_type="process", shuffle=False,
                             collate=big_collate, device="cpu")
    try:
        held = list(loader)  # every batch held at once: a reused segment must not change one
    finally:
        loader.close()
    assert len(held) == 12
    for k, batch in enumerate(held):
        assert float(batch["audio"].min()) == float(batch["audio"].max()) == 4 * k
        assert batch["frames"].dtype == np.int16 and int(batch["frames"].min()) == int(batch["frames"].max()) == 4 * k
        assert batch["small"].tolist() == list(range(4 * k, 4 * k + 4))
        assert not batch["audio"].is_shared()  # copied out of a segment, not torch's shm file


def test_segments_are_reused_and_bounded() -> None:
    segments = result_buffers.Segments.usable()
    if segments is None:
        pytest.skip("no memfd_create or /proc")
    try:
        data = np.arange(3 << 20, dtype=np.uint8)
        refs = [segments.put(data) for _ in range(result_buffers.MOST)]
        assert all(r is not None for r in refs) and segments.put(data) is None  # all busy: as before
        segments.free([refs[0][2]])  # type: ignore[index]
        assert segments.put(data) == refs[0]  # the freed one, reused
        reader = result_buffers.Reader()
        got = reader.load((result_buffers.TAG, refs[1], data.nbytes, "numpy", "|u1", data.shape))
        assert np.array_equal(got, data) and reader.take_freed() == [refs[1][2]]  # type: ignore[index]
    finally:
        segments.close()
