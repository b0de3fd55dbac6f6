"""Loader arguments a user gets wrong: DataLoader names, non-boolean flags, decode keys
for fields that do not exist, a transform returning None, a forgotten set_epoch; and
what ranks get with drop_last=False when the size does not divide."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from faults_helpers import Numbers, ids

import feedline
from feedline.errors import ArgumentError, ConfigError, DecodeError, WorkerError
from feedline.pipeline.options import RepeatedOrderWarning


@pytest.mark.parametrize(("name", "value", "hint"), [
    ("num_workers", 4, "workers="), ("pin_memory", True, "pinned"),
    ("persistent_workers", True, "persist"), ("prefetch_factor", 2, "prefetch="),
    ("collate_fn", list, "collate="), ("sampler", None, "seed="),
    ("worker_init_fn", print, "transform="), ("generator", None, "seed=")])
def test_dataloader_argument_names_point_to_feedlines(name: str, value: Any, hint: str) -> None:
    with pytest.raises(ArgumentError) as info:
        feedline.Loader(Numbers(16), batch_size=4, **{name: value})
    err = info.value
    assert isinstance(err, TypeError) and err.field == name and hint in err.fix
    assert "unexpected keyword" not in str(err)


def test_a_misspelt_argument_gets_the_close_names() -> None:
    with pytest.raises(ArgumentError, match="batch_size=") as info:
        feedline.Loader(Numbers(16), batchsize=4)
    assert info.value.field == "batchsize"


@pytest.mark.parametrize("name", ["shuffle", "drop_last", "in_order"])
@pytest.mark.parametrize("value", ["yes", 1, None, "False"])
def test_flags_must_be_booleans(name: str, value: Any) -> None:
    with pytest.raises(TypeError) as info:
        feedline.Loader(Numbers(16), batch_size=4, **{name: value})
    assert isinstance(info.value, ArgumentError) and info.value.field == name


class _Stream(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """The streaming shape: samples come from iteration, there is no index."""

    def __iter__(self) -> Any:
        return iter(range(10))


@pytest.mark.parametrize("stream", [_Stream(), (i for i in range(10))], ids=["iterable", "gen"])
def test_a_stream_is_refused_with_the_way_to_feed_it(stream: Any) -> None:
    # torch's IterableDataset has a __getitem__ (Dataset's, raising NotImplementedError):
    # it was refused as "not a map-style dataset", with no way forward
    with pytest.raises(ArgumentError, match="stream") as info:
        feedline.Loader(stream, batch_size=4)
    assert info.value.field == "dataset" and "feedline.wrap(DataLoader" in info.value.fix
    wrapped = feedline.wrap(torch.utils.data.DataLoader(_Stream(), batch_size=4))  # the fix
    assert [b.tolist() for b in wrapped] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_numpy_booleans_are_booleans() -> None:
    with feedline.Loader(Numbers(16), batch_size=4, workers=1, shuffle=np.bool_(False)) as ld:
        assert ids(next(iter(ld))) == [0, 1, 2, 3]


def _pack(root: Path) -> Path:
    from feedline.format import pack

    src = root / "src"
    src.mkdir()
    for i in range(8):
        (src / f"s{i}.cls").write_text(str(i))
        (src / f"s{i}.txt").write_text(f"sample {i}")
    out = root / "data"
    pack(src, out)
    return out


def test_decode_for_a_field_that_does_not_exist_names_the_fields(tmp_path: Path) -> None:
    data = _pack(tmp_path)
    with pytest.raises(ConfigError) as info:
        feedline.Loader(data, batch_size=4, decode={"jpeg": bytes})
    assert info.value.field == "jpeg" and "cls" in str(info.value) and "txt" in str(info.value)
    # a field name or an extension of one is fine
    for key in ("txt", "cls"):
        feedline.Loader(data, batch_size=4, workers=1, decode={key: bytes}).close()


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_a_transform_returning_none_names_the_key(worker_type: str) -> None:
    loader = feedline.Loader(Numbers(16), batch_size=4, workers=1, worker_type=worker_type,
                             shuffle=False, transform=_forgets_return)
    with pytest.raises((WorkerError, DecodeError)) as info:
        list(loader)
    assert info.value.key == "0" and "None" in str(info.value)
    loader.close()


def _forgets_return(sample: dict[str, Any]) -> None:
    sample["x"] = sample["x"] * 2


def test_a_second_pass_without_set_epoch_warns_once() -> None:
    with feedline.Loader(Numbers(16), batch_size=4, workers=1, seed=5) as loader:
        first = [ids(b) for b in loader]
        with pytest.warns(RepeatedOrderWarning, match="set_epoch"):
            assert [ids(b) for b in loader] == first  # the order repeats
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            list(loader)  # once per loader
            loader.set_epoch(1)
            list(loader)
            loader.set_epoch(1)  # the same epoch again, on purpose: no warning
            list(loader)


def test_an_unshuffled_loader_repeats_without_a_warning() -> None:
    # a validation loader (shuffle=False) run every epoch: the order is the same anyway
    with feedline.Loader(Numbers(16), batch_size=4, workers=1, shuffle=False) as loader, \
            warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [ids(b) for b in loader] == [ids(b) for b in loader]


@pytest.mark.parametrize("world", [2, 3, 4])
@pytest.mark.parametrize("n", [37, 41, 50])
def test_drop_last_false_shares_as_documented(world: int, n: int) -> None:
    """Every rank gets the same number of samples; when ``world`` does not divide ``n``
    the first ``(-n) % world`` samples of the epoch's order are repeated on other ranks
    (the documented wrap-around), nothing else is seen twice and nothing is lost."""
    shares = []
    for rank in range(world):
        with feedline.Loader(Numbers(n), batch_size=4, workers=1, seed=7, drop_last=False,
                             rank=rank, world_size=world) as loader:
            shares.append([i for b in loader for i in ids(b)])
    assert len({len(s) for s in shares}) == 1
    seen = Counter(i for s in shares for i in s)
    assert set(seen) == set(range(n))
    twice = sorted(i for i, c in seen.items() if c == 2)
    assert max(seen.values()) <= 2 and len(twice) == (-n) % world
    from feedline.pipeline.sampler import global_order

    assert sorted(twice) == sorted(global_order(n, 7, 0, True)[: (-n) % world].tolist())


def test_a_lambda_for_process_workers_names_the_argument() -> None:
    with (pytest.raises(ConfigError, match="cannot receive transform=: it does not pickle") as e,
          feedline.Loader(Numbers(16), batch_size=4, workers=2, worker_type="process",
                          transform=lambda s: s) as loader):
        next(iter(loader))
    assert "module level" in (e.value.fix or "")
    with (pytest.raises(ConfigError, match="cannot receive collate="),
          feedline.Loader(Numbers(16), batch_size=4, workers=2, worker_type="process",
                          collate=lambda samples: samples) as loader):
        next(iter(loader))


def _always_fails(sample: Any) -> Any:
    raise KeyError("label")


def test_skip_that_runs_out_of_samples_says_which_stage_fails() -> None:
    with (pytest.raises(WorkerError, match=r"\d+ x KeyError in transform") as e,
          feedline.Loader(Numbers(16), batch_size=4, workers=1, on_error="skip",
                          transform=_always_fails) as loader):
        next(iter(loader))
    assert e.value.stage == "transform" and "transform function" in (e.value.fix or "")


@pytest.mark.timeout(120)
def test_a_script_without_the_main_guard_is_told_to_add_it(tmp_path: Path) -> None:
    """Process workers started by the forkserver (or spawn) import the training script again:
    one that starts its loader at import time gets the guard as the fix, in the worker and in
    the parent. Forked workers (the default where safe) import nothing: it runs as is."""
    text = ("import numpy as np, feedline\n"
            "class Data:\n"
            "    def __len__(self): return 16\n"
            "    def __getitem__(self, i): return {'x': np.full(2, i, np.float32)}\n"
            "loader = feedline.Loader(Data(), batch_size=4, workers=1, worker_type='process'METHOD)\n"
            "print(sum(1 for _ in loader))\n")
    env = {**os.environ, "PYTHONPATH": str(Path(feedline.__file__).resolve().parents[1])}
    unguarded = text.replace("METHOD", ", start_method='forkserver'")
    guarded = unguarded.replace("loader = ", "if __name__ == '__main__':\n    loader = ").replace(
        "print(sum", "    print(sum")
    # three scripts, three independent interpreters: run side by side (each is mostly one
    # core importing torch; one after another they took 10 s of a two-core CI run)
    procs = []
    for name, body in (("forked", text.replace("METHOD", "")), ("unguarded", unguarded),
                       ("guarded", guarded)):
        path = tmp_path / f"train_{name}.py"
        path.write_text(body, encoding="utf-8")
        procs.append(subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env))
    (forked, forked_err), (_, err), (out, guarded_err) = (p.communicate(timeout=110) for p in procs)
    assert procs[0].returncode == 0 and forked.strip() == "4", forked_err  # forked: no re-import
    assert procs[1].returncode != 0
    assert "WorkerDied" in err and 'if __name__ == "__main__":' in err.splitlines()[-1]
    assert "worker process (spawn or forkserver) importing the training script" in err  # the worker's own line
    assert procs[2].returncode == 0 and out.strip() == "4", guarded_err


@pytest.mark.timeout(120)
def test_auto_moving_to_processes_never_runs_an_unguarded_script_again(tmp_path: Path) -> None:
    """``worker_type="auto"`` deciding on processes in a script without the guard: the
    workers would import the script and run its top level again, up to the loop. The
    loader sees the loop runs at the script's top level outside a guard, starts no
    process, stays on threads and says why; the script's own loop runs once."""
    script = tmp_path / "train_auto_unguarded.py"
    script.write_text(
        "import numpy as np, feedline\n"
        "from feedline.pipeline import auto\n"
        "auto.GIL_HELD, auto.GIL_BOUND = (-1.0, 2.0), 100.0  # every measure: processes\n"
        "auto.SHORT_PASS_SECONDS = 0.0  # however short the epoch\n"
        "class Data:\n"
        "    def __len__(self): return 64\n"
        "    def __getitem__(self, i): return {'x': np.full(2, i, np.float32)}\n"
        "loader = feedline.Loader(Data(), batch_size=2, workers=2, worker_type='auto')\n"
        "print('EPOCH', sum(1 for _ in loader), flush=True)\n"
        "loader._rt.settle(60)\n"
        "print('WHY', loader.stats['auto']['why'], flush=True)\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(Path(feedline.__file__).resolve().parents[1])}
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=110,
                         cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("EPOCH") == 1, run.stdout
    assert "processes were not started" in run.stdout and "line 9" in run.stdout, run.stdout
    assert "__main__" in run.stdout and "Traceback" not in run.stderr, run.stderr
