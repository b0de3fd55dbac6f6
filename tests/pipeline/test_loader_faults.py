"""Faults: errors with their place, dead workers, timeouts, skipping, no leaks, small /dev/shm."""

from __future__ import annotations

import functools
import multiprocessing as mp
import os
import shutil
import signal
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import pytest
from loader_helpers import (
    Failing,
    Huge,
    Numbers,
    batch_ids,
    fail_on,
    flat,
    hang_past,
    report_pid_and_hang,
)

import feedline
from feedline.errors import LoaderTimeout, ResourceError, WorkerDied, WorkerError
from feedline.pipeline import _dropped
from feedline.pipeline.options import SkippedSampleWarning


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_transform_error_keeps_type_traceback_and_place(worker_type: str) -> None:
    loader = feedline.Loader(Numbers(32), batch_size=4, workers=2, worker_type=worker_type,
                             shuffle=False, transform=functools.partial(fail_on, bad=9))
    with pytest.raises(WorkerError) as info:
        list(loader)
    err = info.value
    assert err.exc_type == "ZeroDivisionError" and err.key == "9" and err.stage == "transform"
    assert err.worker.startswith("feedline-") and "fail_on" in err.traceback_text
    assert isinstance(err.__cause__, ZeroDivisionError)
    # printed: the user's frame on the error's line and first in the cause, no machinery
    assert err.at.startswith(str(Path(__file__).parent / "loader_helpers.py:")) and err.at.endswith(" in fail_on")
    _assert_short(err, "fail_on")
    loader.close()


def _assert_short(err: BaseException, function: str) -> None:
    printed = "".join(traceback.format_exception(err))
    src = str(Path(feedline.__file__).parent)
    ours = [line for line in printed.splitlines() if line.strip().startswith(f'File "{src}')]
    assert len(ours) == 1 and "in __next__" in ours[0], printed  # before: 8 to 10 frames
    assert f"in {function}" in printed.split("direct cause")[0], printed


@pytest.mark.timeout(60)
@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_collate_error_names_the_batch_and_the_line(worker_type: str) -> None:
    def first_x(samples: list[dict[str, Any]]) -> Any:
        return [s["text"] for s in samples]

    collate = first_x if worker_type == "thread" else functools.partial(_key_of, key="text")
    with feedline.Loader(Numbers(16), batch_size=4, workers=1, worker_type=worker_type, shuffle=False,
                         collate=collate) as loader, pytest.raises(WorkerError) as info:
        next(iter(loader))
    err = info.value  # before: a bare KeyError from thread workers, no key nor line
    assert err.stage == "collate" and "KeyError in collate: 'text' (batch of 0, 1, 2 and 1 more)" in str(err)
    assert isinstance(err.__cause__, KeyError) and err.at.endswith("first_x" if worker_type == "thread" else "_key_of")
    _assert_short(err, "first_x" if worker_type == "thread" else "_key_of")


def _key_of(samples: list[dict[str, Any]], key: str) -> Any:
    return [s[key] for s in samples]


def test_decode_error_names_shard_and_key(packed: Path) -> None:
    ds = feedline.open_dataset(packed)
    loader = feedline.Loader(ds, batch_size=4, workers=2, shuffle=False,
                             decode={"jpg": lambda b: 1 / 0 if bytes(b[:2]) else b})
    with pytest.raises(WorkerError) as info:
        next(iter(loader))
    assert info.value.shard == "shard-000000.tar" and info.value.key.startswith("s00")
    assert info.value.stage == "decode" and info.value.exc_type == "ZeroDivisionError"
    loader.close()


@pytest.mark.timeout(120)
def test_killed_process_worker_is_reported_within_10s() -> None:
    ctx = mp.get_context("spawn")
    pids = ctx.Queue()
    loader = feedline.Loader(Numbers(32), batch_size=4, workers=2, worker_type="process",
                             shuffle=False,
                             transform=functools.partial(report_pid_and_hang, queue=pids))
    killed: list[float] = []

    def killer() -> None:
        pid = pids.get(timeout=60)  # a worker is inside the transform now
        killed.append(time.monotonic())
        os.kill(pid, signal.SIGKILL)

    it = iter(loader)
    thread = threading.Thread(target=killer)
    thread.start()
    with pytest.raises(WorkerDied) as info:
        next(it)
    assert time.monotonic() - killed[0] < 10
    assert info.value.signal == "SIGKILL" and info.value.worker.startswith("feedline-process_")
    thread.join()
    loader.close()  # terminates the other, still hanging, worker


@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("ignore::feedline.pipeline.options.OversubscribedWarning")
def test_closing_stuck_process_workers_waits_once_for_all_of_them() -> None:
    """Before: 2 s for each stuck worker before its TERM (four: 8 s; eight: 16 s)."""
    loader = feedline.Loader(Numbers(64), batch_size=4, workers=4, worker_type="process",
                             shuffle=False, transform=functools.partial(hang_past, first=4))
    it = iter(loader)
    assert batch_ids(next(it)) == [0, 1, 2, 3]  # then every worker takes a batch that hangs
    t0 = time.monotonic()
    loader.close()
    assert time.monotonic() - t0 < 5


def test_a_hanging_decode_raises_loader_timeout() -> None:
    release = threading.Event()

    def hang(sample: dict[str, Any]) -> dict[str, Any]:
        if sample["y"] == 5:
            release.wait(30)
        return sample

    loader = feedline.Loader(Numbers(16), batch_size=4, workers=2, shuffle=False,
                             transform=hang, timeout="0.5s")
    it = iter(loader)
    assert batch_ids(next(it)) == [0, 1, 2, 3]
    with pytest.raises(LoaderTimeout) as info:
        next(it)
    assert info.value.batch == 1 and isinstance(info.value, TimeoutError)
    t0 = time.monotonic()
    with pytest.warns(RuntimeWarning, match=r"feedline-worker_\d still running"):
        loader.close()  # the stuck worker is left behind after timeout, not waited for
    assert time.monotonic() - t0 < 5
    stuck = [t for t in threading.enumerate() if t.name.startswith("feedline-worker_")]
    assert stuck and all(t.daemon for t in stuck)  # cannot keep the interpreter alive
    release.set()
    for t in stuck:
        t.join(10)
    assert not any(t.is_alive() for t in stuck)


def test_skip_keeps_batch_sizes_counts_and_rank_lockstep() -> None:
    bad = {3, 4, 17, 30, 31, 32}

    def run(rank: int) -> tuple[list[list[int]], dict[str, Any]]:
        with feedline.Loader(Failing(64, bad), batch_size=8, workers=2, seed=4, rank=rank,
                             world_size=2, on_error="skip") as loader:
            return [batch_ids(b) for b in loader], loader.stats

    r0, stats0 = run(0)
    r1, stats1 = run(1)
    assert len(r0) == len(r1) == 4  # lockstep: same number of batches on each rank
    assert all(len(b) == 8 for b in r0 + r1)
    assert not bad & set(flat(r0 + r1))
    # each bad sample counts once, though one met as a refill candidate is met again later
    assert stats0["skipped"] + stats1["skipped"] == len(bad)
    assert {s["key"] for s in stats0["skipped_samples"] + stats1["skipped_samples"]} == {
        str(i) for i in bad}
    assert run(0)[0] == r0  # the refill is deterministic


@pytest.mark.timeout(60)
def test_the_first_skip_is_warned_once_with_its_key_and_error() -> None:
    # before: on_error="skip" dropped bad files without a word (a folder with many broken
    # downloads trained on fewer images than the user thought)
    with feedline.Loader(Failing(32, {5, 20}), batch_size=4, workers=1, seed=0,
                         on_error="skip") as loader:
        with pytest.warns(SkippedSampleWarning) as seen:
            for epoch in range(2):
                loader.set_epoch(epoch)
                assert len(list(loader)) == 8
        stats = loader.stats
    mine = [w for w in seen if w.category is SkippedSampleWarning]
    assert len(mine) == 1 and stats["skipped"] == 4
    text = str(mine[0].message)
    assert "KeyError" in text and "is broken" in text and "stats['skipped']" in text
    assert any(f"skipped sample '{s['key']}'" in text for s in stats["skipped_samples"])
    assert mine[0].filename == __file__  # points at the loop that met it
    assert all("is broken" in s["message"] for s in stats["skipped_samples"])


class PhotoFolder:
    """torchvision's ImageFolder in miniature: ``samples`` holds (path, class) per index."""

    def __init__(self, root: Path) -> None:
        self.samples = [(os.fspath(p), 0) for p in sorted(root.glob("*.jpg"))]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> dict[str, Any]:
        import numpy as np
        from PIL import Image

        path, label = self.samples[i]
        return {"jpg": np.asarray(Image.open(path).convert("RGB")), "cls": label}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_a_broken_photo_of_a_map_style_folder_is_named_by_its_file(tmp_path: Path, worker_type: str) -> None:
    # before: "OSError in read: Truncated File Read [key='2']": an index, not the photo to delete
    import numpy as np
    from PIL import Image

    for i in range(6):
        Image.fromarray(np.full((8, 8, 3), i * 40, np.uint8)).save(tmp_path / f"p{i}.jpg")
    whole = (tmp_path / "p2.jpg").read_bytes()
    (tmp_path / "p2.jpg").write_bytes(whole[: len(whole) // 2])
    ds = PhotoFolder(tmp_path)
    with feedline.Loader(ds, batch_size=3, workers=1, worker_type=worker_type, shuffle=False) as loader, \
            pytest.raises(WorkerError) as caught:
        list(loader)
    assert caught.value.file == os.fspath(tmp_path / "p2.jpg") and "p2.jpg" in str(caught.value)
    import torch

    half = torch.utils.data.Subset(ds, [5, 2, 0])  # a random_split half: index 1 is p2
    with feedline.Loader(half, batch_size=3, workers=1, worker_type=worker_type, shuffle=False) as loader, \
            pytest.raises(WorkerError, match=r"key='1'.*p2\.jpg"):
        list(loader)
    with feedline.Loader(ds, batch_size=3, workers=1, worker_type=worker_type, shuffle=False,
                         on_error="skip") as loader, pytest.warns(SkippedSampleWarning, match="p2.jpg"):
        assert len(list(loader)) == 2
        assert [s["file"] for s in loader.stats["skipped_samples"]] == [os.fspath(tmp_path / "p2.jpg")]


def test_abandoned_loaders_leave_nothing_behind() -> None:
    def snapshot() -> tuple[int, int, set[str]]:  # /dev/shm: ours only (not others' torch_*)
        assert _dropped.settle(60)  # dropped loaders are closed on feedline's closer thread
        return (len(os.listdir("/proc/self/fd")), threading.active_count(),
                {f for f in os.listdir("/dev/shm") if f.startswith("feedline-")})

    def once() -> None:
        loader = feedline.Loader(Numbers(64), batch_size=4, workers=3, seed=1)
        it = iter(loader)
        next(it)
        next(it)  # leave the epoch early with batches in flight

    once()
    before = snapshot()
    for _ in range(200):
        once()
    after = snapshot()
    assert after[0] <= before[0] and after[1] <= before[1] and after[2] <= before[2]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("loops", [1, pytest.param(10, marks=pytest.mark.slow)])
def test_abandoned_process_loaders_leave_nothing_behind(loops: int) -> None:
    import psutil

    def once() -> None:
        loader = feedline.Loader(Numbers(64), batch_size=4, workers=1, worker_type="process")
        it = iter(loader)
        next(it)

    def ours() -> set[str]:  # other processes on this host use /dev/shm too (torch_*)
        return {f for f in os.listdir("/dev/shm") if f.startswith(f"feedline-{os.getpid()}-")}

    once()
    assert _dropped.settle(60)  # dropped loaders are closed on feedline's closer thread
    fds, shm = len(os.listdir("/proc/self/fd")), ours()
    for _ in range(loops):
        once()
    assert _dropped.settle(60)
    assert len(os.listdir("/proc/self/fd")) <= fds
    assert ours() <= shm
    # workers are children of the forkserver (one per process, shared by every loader: it
    # stays), so look at the whole tree and leave out only the server itself
    me = psutil.Process()
    left = [p for p in me.children(recursive=True) if p.is_running()
            and p.status() != psutil.STATUS_ZOMBIE and "feedline" in " ".join(p.cmdline())]
    assert not [p for p in left
                if not (p.ppid() == me.pid and "multiprocessing.forkserver" in " ".join(p.cmdline()))]


def test_too_small_shm_is_an_error_before_the_first_batch(tmp_path: Path) -> None:
    free = shutil.disk_usage("/dev/shm").free
    size = free // 2 + 2**20  # one batch of two such samples, times a window of two: > free
    loader = feedline.Loader(Huge(4, size), batch_size=2, workers=1, prefetch=1,
                             worker_type="process", pinned_budget=4 * size)
    before = set(os.listdir("/dev/shm"))
    with pytest.raises(ResourceError, match="/dev/shm") as info:
        next(iter(loader))  # raised when the probe (in a worker) has decided the layout
    assert "fix" in str(info.value).lower() or info.value.fix
    assert set(os.listdir("/dev/shm")) == before
    loader.close()
