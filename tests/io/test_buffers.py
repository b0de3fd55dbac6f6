"""The host buffer pool: aligned, recycled only when no view is left."""

from __future__ import annotations

import threading

import pytest

from feedline.io import HostBufferPool, buffer_address


def test_buffers_are_aligned_and_recycled_once_views_are_gone() -> None:
    pool = HostBufferPool(max_cached=2)
    a = pool.acquire(10_000)
    assert buffer_address(a) % 4096 == 0 and a.size == 10_000
    view = memoryview(a)[100:200]
    del a
    b = pool.acquire(10_000)  # the first buffer is still seen through `view`
    assert pool.allocations == 2
    view_addr = buffer_address(view) - 100
    assert buffer_address(b) != view_addr
    del view, b
    c = pool.acquire(5_000)
    assert pool.allocations == 2  # recycled, no new allocation
    assert buffer_address(c) % 4096 == 0


def test_pool_grows_past_max_cached_without_losing_data() -> None:
    pool = HostBufferPool(max_cached=1)
    held = [pool.acquire(1000) for _ in range(4)]
    for i, h in enumerate(held):
        h[:] = i
    assert [int(h[0]) for h in held] == [0, 1, 2, 3]
    assert pool.allocations == 4
    assert pool.cached_bytes() >= 1000
    held.clear()
    big = pool.acquire(1 << 20)
    assert big.size == 1 << 20
    pool.clear()
    assert pool.cached_bytes() == 0


def test_threads_never_share_a_live_buffer() -> None:
    pool = HostBufferPool(max_cached=4)
    errors: list[str] = []

    def work(tag: int) -> None:
        for _ in range(200):
            buf = pool.acquire(4096)
            buf[:] = tag
            if int(buf.min()) != tag or int(buf.max()) != tag:
                errors.append(f"buffer overwritten under thread {tag}")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_bad_sizes() -> None:
    with pytest.raises(ValueError, match="nbytes"):
        HostBufferPool().acquire(-1)
    with pytest.raises(ValueError, match="max_cached"):
        HostBufferPool(max_cached=-1)
