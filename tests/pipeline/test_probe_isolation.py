"""Process workers isolate faults from batch 0 on: the layout probe runs in a worker."""

from __future__ import annotations

import functools
import os
import time

import pytest
from loader_helpers import Numbers, crash_in_worker, with_lock

import feedline
from feedline.errors import LoaderTimeout, WorkerDied, WorkerError


def _loader(transform: object, **kw: object) -> feedline.Loader:
    return feedline.Loader(Numbers(32), batch_size=4, workers=2, worker_type="process",
                           shuffle=False, transform=transform, **kw)  # type: ignore[arg-type]


@pytest.mark.timeout(120)
def test_a_segfault_in_batch_0_is_worker_died_not_our_death() -> None:
    with _loader(functools.partial(crash_in_worker, how="segv")) as loader, \
            pytest.raises(WorkerDied) as info:
        next(iter(loader))
    assert info.value.signal == "SIGSEGV" and info.value.worker.startswith("feedline-process_")


@pytest.mark.timeout(120)
def test_os_exit_in_batch_0_is_worker_died_with_the_code() -> None:
    with _loader(functools.partial(crash_in_worker, how="exit")) as loader, \
            pytest.raises(WorkerDied) as info:
        next(iter(loader))
    assert info.value.exitcode == 3


@pytest.mark.timeout(120)
def test_a_hang_in_batch_0_obeys_timeout() -> None:
    # timeout=1, not 3: the contract is the same (the hang is cut at the timeout, not
    # before, not never) and the test waits 2 s less (close() then gives the worker 2 s)
    loader = _loader(functools.partial(crash_in_worker, how="hang"), timeout=1)
    t0 = time.monotonic()
    with pytest.raises(LoaderTimeout) as info:
        next(iter(loader))
    assert 0.9 < time.monotonic() - t0 < 30
    assert info.value.batch == 0
    loader.close()  # terminates the hanging worker
    assert os.getpid() > 0  # and we are still here


@pytest.mark.timeout(120)
@pytest.mark.parametrize("batch", [0, 3])
def test_an_unpicklable_result_names_key_and_field(batch: int) -> None:
    transform = with_lock if batch == 0 else functools.partial(_lock_from, start=4 * batch)
    with _loader(transform) as loader:
        it = iter(loader)
        with pytest.raises(WorkerError) as info:
            for _ in range(batch + 1):
                next(it)
    err = info.value
    assert err.field == "handle" and err.key == str(4 * batch) and err.stage == "send", err
    assert "pickle" in str(err).lower() and err.fix


def _lock_from(sample: dict[str, object], start: int) -> dict[str, object]:
    """Samples from ``start`` on carry a lock in a ragged field; earlier ones a string."""
    import threading

    value: object = threading.Lock() if int(sample["y"]) >= start else "ok"  # type: ignore[call-overload]
    return {**sample, "handle": value}
