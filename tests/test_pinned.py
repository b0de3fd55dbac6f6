"""feedline.pinned's bookkeeping on CPU, with a registrar that records what CUDA would be asked to lock
(the real cudaHostRegister runs in tests/gpu: checkpoint_test.py, pipeline_transfer_test.py)."""

from __future__ import annotations

import ctypes
import gc

import pytest
import torch

from feedline.io._buffers import PAGE
from feedline.pinned import Registrar, pinned_empty

pytestmark = pytest.mark.timeout(60)


class Recorder:
    """Locks nothing; records each call, and reads the pages at unregister time (they must still be mapped)."""

    def __init__(self) -> None:
        self.locked: dict[int, int] = {}
        self.unlocked: list[int] = []

    def registrar(self) -> Registrar:
        def register(ptr: int, n: int) -> int:
            self.locked[ptr] = n
            return 0

        def unregister(ptr: int) -> int:
            ctypes.string_at(ptr, self.locked[ptr])  # a read of freed, unmapped pages would crash here
            self.unlocked.append(ptr)
            return 0

        return Registrar(register, unregister)


@pytest.mark.parametrize(("shape", "dtype"), [((257 << 20,), torch.uint8), ((3, 1001, 7), torch.float32),
                                              ((5,), torch.float16), ((2, 3), torch.bool)])
def test_exactly_the_pages_asked_are_locked_from_a_page_boundary(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    rec = Recorder()
    t = pinned_empty(shape, dtype, registrar=rec.registrar())
    assert t.shape == shape and t.dtype == dtype and t.is_contiguous()
    [(ptr, n)] = rec.locked.items()
    nbytes = t.numel() * t.element_size()
    assert ptr % PAGE == 0 and t.data_ptr() == ptr
    assert n == -(-nbytes // PAGE) * PAGE  # not the next power of two (257 MiB: 512 MiB in torch's allocator)
    t.fill_(1)
    assert bool((t == 1).all())


def test_the_pages_are_unlocked_once_after_the_last_view_is_gone_and_before_they_are_freed() -> None:
    rec = Recorder()
    t = pinned_empty((1 << 20,), torch.float32, registrar=rec.registrar())
    view = t[10:20].view(torch.int32)
    arr = t.numpy()[5:]
    del t
    gc.collect()
    assert rec.unlocked == [], "unlocked while a view still uses the memory"
    del view
    gc.collect()
    assert rec.unlocked == []
    del arr
    gc.collect()
    assert rec.unlocked == list(rec.locked)  # once, and the recorder read the pages while still mapped


def test_an_empty_tensor_locks_nothing() -> None:
    rec = Recorder()
    t = pinned_empty((0, 3), torch.float32, registrar=rec.registrar())
    assert t.shape == (0, 3) and rec.locked == {}
