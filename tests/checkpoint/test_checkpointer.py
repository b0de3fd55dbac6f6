"""Checkpointer round trips, reuse of staging memory, rotation, busy saves and the checkpoint span."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from ckstate import assert_same, make_state

from feedline import spans
from feedline.checkpoint import Checkpointer, load
from feedline.errors import ConfigError, ReadError, ResourceError


@pytest.mark.parametrize("io", ["buffered", "direct", "auto"])
def test_round_trip_every_leaf_kind(tmp_path: Path, io: str) -> None:
    state = make_state(3)
    with Checkpointer(tmp_path, io=io) as ck:
        assert ck.save(7, state)
        ck.wait()
        assert ck.latest() == 7
        assert_same(state, ck.load())
        assert ck.writer_choice is not None and ck.writer_choice.reason
    assert_same(state, load(tmp_path, 7))


def test_save_returns_before_the_write_and_later_changes_do_not_leak(tmp_path: Path) -> None:
    x = torch.arange(1 << 20, dtype=torch.float32)
    with Checkpointer(tmp_path, io="buffered") as ck:
        ck.save(1, {"x": x})
        x.add_(1)  # the loop keeps training right after save() returned
        ck.wait()
        assert torch.equal(ck.load()["x"], torch.arange(1 << 20, dtype=torch.float32))


def test_unaligned_and_zero_size_tensors_round_trip(tmp_path: Path) -> None:
    sizes = [0, 1, 7, 4095, 4096, 4097, 8191, 12289, 0]
    state = {f"t{i}": np.arange(n, dtype=np.uint8) for i, n in enumerate(sizes)}
    state["last_unaligned"] = torch.arange(1001, dtype=torch.int16)  # file ends off a 4096 boundary
    with Checkpointer(tmp_path, io="direct") as ck:
        ck.save(0, state)
        ck.wait()
        data = next(p for p in tmp_path.iterdir() if p.suffix == ".bin")
        assert data.stat().st_size % 4096 != 0
        assert_same(state, ck.load())


def test_saving_every_n_steps_allocates_staging_once(tmp_path: Path) -> None:
    model = torch.nn.Linear(64, 64)
    with Checkpointer(tmp_path, io="buffered", keep=2) as ck:
        for step in range(0, 60, 10):
            with torch.no_grad():
                model.weight.add_(1)
            ck.save(step, {"model": model.state_dict(), "step": step})
        ck.wait()
        assert ck.staging_allocations == 1
        assert ck.stats.saves == 6 and ck.stats.committed == 6
        assert torch.equal(ck.load()["model"]["weight"], model.weight.detach())


def test_saves_after_the_first_allocate_no_staging_bytes(tmp_path: Path) -> None:
    # the count behind "allocates nothing after the first": Python-heap bytes (numpy's
    # buffers are traced) allocated inside each save() of a 4 MiB state
    import tracemalloc

    state = {"w": np.ones(1 << 20, dtype=np.float32), "step": 0}
    peaks = []
    with Checkpointer(tmp_path, io="buffered", keep=1) as ck:
        tracemalloc.start()
        try:
            for step in range(4):
                state["w"][0], state["step"] = step, step
                tracemalloc.reset_peak()
                base = tracemalloc.get_traced_memory()[0]
                ck.save(step, state)
                peaks.append(tracemalloc.get_traced_memory()[1] - base)
                ck.wait()
        finally:
            tracemalloc.stop()
        assert ck.staging_allocations == 1 and int(ck.load()["w"][0]) == 3
    assert peaks[0] >= 4 << 20  # the first save allocates the staging buffer
    assert max(peaks[1:]) < 64 << 10, peaks  # the later ones only the header's small objects


def test_keep_rotates_after_commit_and_removes_leftovers(tmp_path: Path) -> None:
    (tmp_path / "step-0000000099.deadbeef.bin").write_bytes(b"crash leftover")
    with Checkpointer(tmp_path, keep=2, io="buffered") as ck:
        for step in (1, 2, 3, 4):
            ck.save(step, {"v": np.full(10, step)})
            ck.wait()
            assert ck.steps() == [max(1, step - 1), step][-min(step, 2):]
    names = sorted(p.name for p in tmp_path.iterdir())
    assert [n for n in names if n.endswith(".json")] == ["step-0000000003.json", "step-0000000004.json"]
    assert len([n for n in names if n.endswith(".bin")]) == 2
    assert load(tmp_path, 3)["v"][0] == 3


@pytest.mark.parametrize("io", ["buffered", "direct"])
def test_rotated_data_files_are_written_over_by_later_saves(tmp_path: Path, io: str) -> None:
    # keep= hands a rotated checkpoint's data file to the next save, which writes over its blocks in place
    # (no allocation, no free/trim of the state's size per save); a smaller state cuts it, a larger one grows it
    sizes = {1: 5000, 2: 5000, 3: 5000, 4: 1234, 5: 9000, 6: 5000}
    inode: dict[int, int] = {}
    with Checkpointer(tmp_path, keep=2, io=io) as ck:
        for step, n in sizes.items():
            ck.save(step, {"v": np.full(n, step, np.int64), "s": str(step)})
            ck.wait()
            data = tmp_path / json.loads((tmp_path / f"step-{step:010d}.json").read_bytes())["data"]
            inode[step] = data.stat().st_ino
            assert data.stat().st_size == ck_data_bytes(tmp_path, step)
            for kept in ck.steps():
                got = ck.load(kept)
                assert got["s"] == str(kept) and got["v"].shape == (sizes[kept],) and (got["v"] == kept).all()
        assert (tmp_path / ".recycle.bin").exists()
    assert [inode[s] for s in (4, 5, 6)] == [inode[s] for s in (1, 2, 3)]  # step k+3 wrote over step k's file
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".feedline")) == sorted(
        [f"step-{s:010d}.json" for s in (5, 6)] + [json.loads((tmp_path / f"step-{s:010d}.json").read_bytes())["data"]
                                                    for s in (5, 6)])  # close() removed the spare file


def ck_data_bytes(directory: Path, step: int) -> int:
    return int(json.loads((directory / f"step-{step:010d}.json").read_bytes())["data_bytes"])


def test_a_data_file_recycled_while_it_is_read_is_never_returned(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # keep=1: step 1's data file is renamed for recycling when step 2 commits, and step 3 writes over it.
    # A reader that had it open would read step 3's bytes; without checksums (verify=False) they were returned
    import feedline.checkpoint._load as loading

    ck = Checkpointer(tmp_path, keep=1, io="buffered")
    ck.save(1, {"v": np.full(100, 1)})
    ck.wait()
    pread_into = loading.pread_into

    def read_then_two_saves(fd: int, offset: int, buf: Any) -> int:
        ck.save(2, {"v": np.full(100, 2)})
        ck.wait()
        ck.save(3, {"v": np.full(100, 3)})
        ck.wait()
        return pread_into(fd, offset, buf)  # the file under fd now holds step 3

    monkeypatch.setattr(loading, "pread_into", read_then_two_saves)
    with pytest.raises(ReadError, match=r"step 1 was removed .* while it was being loaded"):
        load(tmp_path, 1, verify=False)
    monkeypatch.undo()
    assert (load(tmp_path)["v"] == 3).all()
    ck.close()


def test_asking_for_a_step_whose_save_did_not_finish_names_its_leftover(tmp_path: Path) -> None:
    with Checkpointer(tmp_path, io="buffered") as ck:
        ck.save(1, {"v": np.arange(3)})
        ck.wait()
    left = tmp_path / "step-0000000002.0badc0de.bin"  # what kill -9 during step 2's write leaves
    left.write_bytes(b"\0" * 100)
    with pytest.raises(ReadError, match=r"step 2 .*: step-0000000002\.0badc0de\.bin is there without its header.*kill -9") as e:
        load(tmp_path, 2)
    assert "[1]" in e.value.fix
    assert load(tmp_path)["v"][2] == 2  # the latest is step 1
    with Checkpointer(tmp_path, io="buffered") as ck:
        ck.save(3, {"v": np.arange(4)})
    assert not left.exists()


def test_a_step_rotated_away_while_it_loads_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # keep= removes a header, then its data. A reader beside the training job that read step 1's header just
    # before was told "cannot open checkpoint data ... this checkpoint is damaged". The rotation here is a
    # real save with keep=1, run at the one point in load() where the race lands.
    import feedline.checkpoint._load as loading

    ck = Checkpointer(tmp_path, keep=1, io="buffered")
    ck.save(1, {"v": np.arange(3)})
    ck.wait()
    read_header = loading.read_header

    def then_rotate(directory: Path, step: int, **kw: Any) -> Any:
        header = read_header(directory, step, **kw)
        ck.save(2, {"v": np.arange(4)})
        ck.wait()
        return header

    monkeypatch.setattr(loading, "read_header", then_rotate)
    with pytest.raises(ReadError, match=r"step 1 was removed .* while it was being loaded \(keep= rotation") as e:
        load(tmp_path, 1)
    assert "[2]" in e.value.fix
    ck.close()


def test_resaving_a_step_replaces_it_atomically(tmp_path: Path) -> None:
    with Checkpointer(tmp_path, io="buffered") as ck:
        ck.save(5, {"v": np.zeros(3)})
        ck.save(5, {"v": np.ones(3)})
        ck.wait()
        np.testing.assert_array_equal(ck.load(5)["v"], np.ones(3))
    assert len(list(tmp_path.glob("*.bin"))) == 1


class _SlowWriter:
    """A real buffered writer that holds each write until the test releases it."""

    name = "buffered"

    def __init__(self, inner: Any) -> None:
        self.inner, self.entered, self.release = inner, threading.Event(), threading.Event()

    def write(self, path: str, buf: Any, nbytes: int, **kw: Any) -> None:
        self.entered.set()
        assert self.release.wait(30)
        self.inner.write(path, buf, nbytes, **kw)


@pytest.mark.parametrize("if_busy", ["wait", "skip"])
def test_a_second_save_while_writing_waits_or_is_skipped(tmp_path: Path, if_busy: str) -> None:
    ck = Checkpointer(tmp_path, io="buffered", if_busy=if_busy)
    ck.save(1, {"v": np.full(1000, 1)})  # first save picks the writer
    ck.wait()
    gate = _SlowWriter(ck._writer)
    ck._writer = gate
    ck.save(2, {"v": np.full(1000, 2)})
    assert gate.entered.wait(30)
    if if_busy == "skip":
        assert ck.save(3, {"v": np.full(1000, 3)}) is False
        assert ck.stats.skipped == 1
        gate.release.set()
        ck.wait()
        assert ck.steps() == [1, 2]
    else:
        t = threading.Thread(target=ck.save, args=(3, {"v": np.full(1000, 3)}))
        t.start()
        t.join(0.2)
        assert t.is_alive()  # blocked behind save 2's write
        gate.release.set()
        t.join(30)
        ck.wait()
        assert ck.steps() == [1, 2, 3] and ck.stats.skipped == 0
    for s in ck.steps():
        assert int(ck.load(s)["v"][0]) == s
    ck.close()


def test_blocked_time_is_a_checkpoint_span(tmp_path: Path) -> None:
    got: list[tuple[str, float, float, dict[str, Any]]] = []

    class Sink:
        def record(self, stage: str, start: float, end: float, attrs: dict[str, Any]) -> None:
            got.append((stage, start, end, attrs))

    sink = Sink()
    spans.install(sink)
    try:
        with Checkpointer(tmp_path, io="buffered") as ck:
            ck.save(4, {"w": torch.ones(1000)})
    finally:
        spans.uninstall(sink)
    [(_stage, start, end, attrs)] = [g for g in got if g[0] == "checkpoint"]
    assert end >= start and attrs["step"] == 4 and attrs["nbytes"] == 4000
    assert ck.stats.last_blocked_s == pytest.approx(end - start)
    assert 0 < attrs["cpu_s"] == pytest.approx(ck.stats.last_blocked_cpu_s, abs=1e-6)


def test_blocked_cpu_time_tells_staging_from_waiting(tmp_path: Path) -> None:
    # The loop thread's CPU time in save() is what staging cost; the rest of the blocked time is waiting
    # (here for the previous write; in the benchmark's slow rounds, for a core other processes held).
    ck = Checkpointer(tmp_path, io="buffered")
    ck.save(1, {"v": np.full(1000, 1)})
    ck.wait()
    gate = _SlowWriter(ck._writer)
    ck._writer = gate
    ck.save(2, {"v": np.full(1000, 2)})
    assert gate.entered.wait(30)
    timer = threading.Timer(0.3, gate.release.set)
    timer.start()
    ck.save(3, {"v": np.full(1000, 3)})  # waits for save 2's write: blocked, not busy
    timer.join()
    ck.close()
    assert ck.stats.last_blocked_s >= 0.3 > 0.2 > ck.stats.last_blocked_cpu_s > 0
    assert len(ck.stats.blocked_cpu_s) == len(ck.stats.blocked_s) == 3


def test_unstorable_values_name_their_path(tmp_path: Path) -> None:
    with Checkpointer(tmp_path) as ck:
        with pytest.raises(ConfigError, match="model/fn") as e:
            ck.save(1, {"model": {"fn": lambda: 0}})
        assert e.value.tensor == "model/fn"
        with pytest.raises(ConfigError, match="object"):
            ck.save(1, {"a": np.array([None, 1], dtype=object)})
    assert not list(tmp_path.iterdir())


def test_an_object_instead_of_its_state_says_what_to_save(tmp_path: Path) -> None:
    # the common slip: the model, optimizer or generator itself in the state (before: "convert it to a tensor...")
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    cases = {"model": (model, "state_dict() instead of the Linear"),
             "optim": (opt, "state_dict() instead of the SGD"),
             "sched": (torch.optim.lr_scheduler.StepLR(opt, 2), "state_dict() instead of the StepLR"),
             "gen": (torch.Generator(), "get_state()"), "np_rng": (np.random.default_rng(0), "bit_generator.state"),
             "dtype": (torch.float16, "'torch.float16'"), "tags": ({"a", "b"}, "sorted(")}
    with Checkpointer(tmp_path) as ck:
        for key, (value, hint) in cases.items():
            with pytest.raises(ConfigError, match=f"at '{key}'") as e:
                ck.save(1, {key: value})
            assert hint in e.value.fix, (key, e.value.fix)


def test_bad_arguments_are_config_errors(tmp_path: Path) -> None:
    for kwargs in ({"io": "fast"}, {"if_busy": "drop"}, {"keep": 0}, {"pinned_budget": "lots"}):
        with pytest.raises(ConfigError):
            Checkpointer(tmp_path, **kwargs)  # type: ignore[arg-type]


def test_a_state_over_the_pinned_budget_fails_with_the_size_needed(tmp_path: Path) -> None:
    with Checkpointer(tmp_path, pinned_budget="64KiB") as ck:
        ck.save(1, {"a": np.zeros(1000)})
        with pytest.raises(ResourceError, match="pinned_budget"):
            ck.save(2, {"a": np.zeros(100_000)})
        ck.wait()
        assert ck.latest() == 1


def test_loading_from_an_empty_directory_says_so(tmp_path: Path) -> None:
    with pytest.raises(ReadError, match="no committed checkpoint"):
        load(tmp_path)
    with Checkpointer(tmp_path) as ck:
        assert ck.latest() is None
        ck.save(2, {"x": 1})
        with pytest.raises(ReadError, match=r"\[2\]"):
            ck.load(3)


def test_resume_a_real_training_loop(tmp_path: Path) -> None:
    """Train, save every 5 steps, restart from the checkpoint into fresh objects: same trajectory."""

    def run(resume: bool, steps: int) -> list[float]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        data = torch.Generator().manual_seed(1)
        start = 0
        with Checkpointer(tmp_path / "ck", keep=2, io="auto") as ck:
            if resume:
                got = ck.load(into={"model": model.state_dict()})
                opt.load_state_dict(got["optim"])
                data.set_state(got["data_rng"])
                start = got["step"] + 1
            losses = []
            for step in range(start, steps):
                x = torch.randn(32, 8, generator=data)
                loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.item())
                if step % 5 == 4:
                    ck.save(step, {"model": model.state_dict(), "optim": opt.state_dict(), "step": step,
                                   "data_rng": data.get_state()})
            return losses

    full = run(False, 20)
    os.unlink(tmp_path / "ck" / "step-0000000019.json")  # pretend the run died after step 14's save
    assert run(True, 20) == full[15:]


@pytest.mark.timeout(120)
def test_resume_in_a_new_process_after_kill_9_gives_bit_identical_losses(tmp_path: Path) -> None:
    """A child trains (tied weights, BatchNorm, SGD/AdamW-amsgrad/Adam, schedulers, GradScaler, three RNGs,
    a feedline.Loader mid-epoch), saves at step 4 and is killed with SIGKILL at step 6; this process
    resumes into fresh objects: every later loss equals the uninterrupted run's, bit for bit."""
    import random
    import signal
    import subprocess
    import sys

    here = Path(__file__).resolve().parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(here.parents[1] / "src"), str(here),
                                                       os.environ.get("PYTHONPATH", "")]))
    child = subprocess.run([sys.executable, str(here / "ck_train.py"), str(tmp_path / "ck"), "8", "4"],
                           capture_output=True, text=True, env=env, timeout=100)
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    assert child.stdout.split() == ["1", "2", "3", "4", "5", "6"]
    sys.path.insert(0, str(here))
    saved = (torch.get_rng_state(), np.random.get_state(), random.getstate(), torch.get_num_threads())
    try:
        from ck_train import run

        torch.set_num_threads(1)  # as the child
        full = run(str(tmp_path / "full"), 8, None)
        resumed = run(str(tmp_path / "ck"), 8, None, resume=True)
    finally:
        sys.path.remove(str(here))
        torch.set_rng_state(saved[0])
        np.random.set_state(saved[1])
        random.setstate(saved[2])
        torch.set_num_threads(saved[3])
    assert len(full) == 8 and resumed == full[4:]


def test_feedline_watch_reports_checkpoint_as_its_own_stage(tmp_path: Path) -> None:
    import feedline
    from feedline.observe import render_text

    model = torch.nn.Linear(64, 64)
    batches = [torch.randn(8, 64) for _ in range(12)]
    with Checkpointer(tmp_path, io="buffered") as ck:
        w = feedline.watch(batches, device="cpu")
        for i, x in enumerate(w):
            model(x).sum().backward()
            if i % 4 == 3:
                ck.save(i, {"model": model.state_dict()})
        rep = w.report()
    assert rep.stages["checkpoint"].count == 3
    assert "checkpoint" in render_text(rep)
