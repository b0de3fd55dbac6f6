"""Every public entry point given arguments of the wrong type or out of range.

What is guaranteed: a typed :class:`FeedlineError` naming the argument (``field``),
never a raw ``TypeError`` from deep inside (pathlib, ``re``, numpy), an
``AttributeError``, an ``OverflowError``, a hang or a huge allocation. The errors stay
``ValueError`` (:class:`ConfigError`) or ``TypeError`` (:class:`ArgumentError`), so code
catching those keeps working. Each value is tried at each argument of each function:
values nobody designed the argument for.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import feedline
from feedline.errors import ArgumentError, ConfigError, FeedlineError, SampleIndexError
from feedline.format import index_tars, inspect, pack, read_manifest, verify
from feedline.units import parse_bytes, parse_duration

HOSTILE: list[Any] = [None, True, -1, 0, 2**70, 1.5, math.nan, math.inf, "", "x", [], {}, object(),
                      b"data", np.float32(2), (1, 2)]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("args")
    src = root / "src"
    src.mkdir()
    for i in range(12):
        (src / f"s{i:02d}.bin").write_bytes(bytes([i]) * 64)
        (src / f"s{i:02d}.cls").write_text(str(i % 3))
    pack(src, root / "data")
    return root / "data"


def _typed(call: Callable[[], Any], what: str, arg: str | None = None) -> None:
    """``call`` returns or raises a FeedlineError; an argument error names ``arg``."""
    try:
        call()
    except FeedlineError as e:
        if arg is not None and isinstance(e, ArgumentError | ConfigError):
            assert e.field is not None or arg in str(e), f"{what}: {e!r} does not name {arg}"
        return
    except Exception as e:  # the message names the case and the escaped exception
        raise AssertionError(f"{what}: raised {type(e).__name__}: {e}") from e


LOADER_ARGS = ["batch_size", "device", "shuffle", "seed", "drop_last", "workers", "worker_type",
               "prefetch", "pinned_budget", "io", "decode", "transform", "collate", "on_error",
               "timeout", "in_order", "rank", "world_size", "shm_dir", "start_method", "placement",
               "decode_on", "decode_size", "stages"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", LOADER_ARGS)
def test_loader_arguments(dataset: Path, name: str) -> None:
    for value in HOSTILE:
        def build(value: Any = value) -> None:
            loader = feedline.Loader(dataset, **{"batch_size": 4, "workers": 1, name: value})
            try:
                next(iter(loader))
            finally:
                loader.close()

        _typed(build, f"Loader({name}={value!r})", name)


def test_loader_limits_refuse_absurd_sizes(dataset: Path) -> None:
    with pytest.raises(ConfigError, match="workers"):  # used to start 2**70 threads: a hang
        feedline.Loader(dataset, workers=2**70)
    with pytest.raises(ConfigError, match="1 EiB"):
        feedline.Loader(dataset, batch_size=4, pinned_budget="1e999")
    with pytest.raises(ConfigError, match="a year"):
        feedline.Loader(dataset, batch_size=4, timeout=2**70)
    loader = feedline.Loader(dataset, batch_size=np.int64(4), workers=1, seed=np.uint8(3))  # numpy ints are ints
    assert loader.batch_size == 4 and len(loader) == 3
    loader.close()


def test_closed_loader_and_dataset_indices(dataset: Path) -> None:
    loader = feedline.Loader(dataset, batch_size=4, workers=1)
    loader.close()
    loader.close()  # twice is fine
    with pytest.raises(ConfigError, match="closed"):
        iter(loader)
    for value in HOSTILE:
        _typed(lambda value=value: loader.set_epoch(value), f"set_epoch({value!r})")
        _typed(lambda value=value: loader.load_state_dict(value), f"load_state_dict({value!r})")

    ds = feedline.open_dataset(dataset)
    for value in [*HOSTILE, [0, -13], [12], np.array([[0, 1]]), np.array([0.5]), [True], ["0"],
                  slice(0, 2), np.uint64(2**63), [[0], [1, 2]], np.array([2**63], dtype=np.uint64)]:
        for name, call in (("read_many", ds.read_many), ("getitem", ds.__getitem__), ("locate", ds.locate)):
            _typed(lambda call=call, value=value: call(value), f"ds.{name}({value!r})")
    with pytest.raises(SampleIndexError) as info:
        ds[12]
    assert isinstance(info.value, IndexError)


@pytest.mark.timeout(60)
@pytest.mark.filterwarnings("ignore::feedline.format.PackWarning")
def test_dataset_and_format_functions(dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # relative paths ("x") land here
    for name in ("io", "verify", "storage_options", "max_window", "max_gap"):
        for value in HOSTILE:
            _typed(lambda name=name, value=value: feedline.open_dataset(dataset, **{name: value}),
                   f"open_dataset({name}={value!r})")
    paths = [*HOSTILE, str(tmp_path / "missing"), str(dataset / "manifest.json"), "/dev/null",
             "bad\0path", os.devnull]
    for value in paths:
        _typed(lambda value=value: feedline.open_dataset(value), f"open_dataset({value!r})")
        for fn in (verify, inspect, read_manifest):
            _typed(lambda fn=fn, value=value: fn(value), f"{fn.__name__}({value!r})")
        _typed(lambda value=value: index_tars(value, tmp_path / "ix"), f"index_tars({value!r})")
        _typed(lambda value=value: pack(value, tmp_path / "p1"), f"pack(sources={value!r})")
        _typed(lambda value=value: pack(dataset.parent / "src", value), f"pack(out_dir={value!r})")
    for name in ("shard_size", "align", "workers", "checksum_algo", "progress", "warn"):
        for value in HOSTILE:
            _typed(lambda name=name, value=value: pack(dataset.parent / "src", tmp_path / "p2", **{name: value}),
                   f"pack({name}={value!r})")


def test_units_refuse_types_and_overflow() -> None:
    for value in [*HOSTILE, "1e999", "-1GiB", np.bool_(True), 10**400]:
        _typed(lambda value=value: parse_bytes(value), f"parse_bytes({value!r})")
        _typed(lambda value=value: parse_duration(value), f"parse_duration({value!r})")
    assert parse_bytes(np.int64(4096)) == 4096 and parse_duration(np.float32(0.5)) == 0.5


CHECKPOINTER_ARGS = ["directory", "pinned_budget", "io", "keep", "if_busy", "durable"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", CHECKPOINTER_ARGS)
def test_checkpointer_arguments(tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # before: Checkpointer(None)/(5)/(b"x") raised TypeError from pathlib, ("\0") ValueError,
    # ("") saved into the working folder, durable="no" was taken as true
    from feedline.checkpoint import Checkpointer

    monkeypatch.chdir(tmp_path)  # directory="x" is a folder here, not in the checkout

    for i, value in enumerate(HOSTILE):
        def build(value: Any = value, i: int = i) -> None:
            kwargs = {"directory": tmp_path / f"ck{i}", name: value}
            ck = Checkpointer(**kwargs)
            try:
                ck.save(1, {"a": np.ones(3)})
                ck.wait()
            finally:
                ck.close()

        _typed(build, f"Checkpointer({name}={value!r})", name)


@pytest.mark.timeout(60)
def test_checkpoint_load_arguments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # before: load(d, "3") and load(d, 3.0) raised "Unknown format code 'd'" (ValueError)
    from feedline.checkpoint import Checkpointer, load

    monkeypatch.chdir(tmp_path)

    with Checkpointer(tmp_path) as ck:
        ck.save(3, {"a": np.ones(2)})
    for value in HOSTILE:
        _typed(lambda value=value: load(tmp_path, value), f"load(step={value!r})", "step")
        _typed(lambda value=value: load(value), f"load({value!r})", "directory")
        _typed(lambda value=value: load(tmp_path, 3, into=value), f"load(into={value!r})", "into")
    assert load(tmp_path, np.int64(3))["a"].sum() == 2
    for name in ("verify", "strict", "copy"):  # before: strict="no" was strict, strict=None was not
        for value in ("no", "False", None, 0, 1.0):
            with pytest.raises(ArgumentError, match=f"{name} must be True or False") as err:
                load(tmp_path, 3, into={"a": np.zeros(2)}, **{name: value})
            assert err.value.field == name
        assert load(tmp_path, 3, **{name: np.bool_(False)})["a"].sum() == 2
