"""Smoke tests of bench/peers_shapes.py and bench/outside_shapes.py (and 12) at their --quick size:
every contender delivers every sample of every shape once, and the JSON carries medians and
ratios against the baseline of the same run. No timing assertions (the machine is shared)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run_quick(name: str, tmp_path: Path,
               args: Callable[[Any], list[str]] = lambda mod: []) -> tuple[Any, dict[str, Any]]:
    """Run ``bench/NAME.py --quick`` plus ``args(module)`` in this process: (its module, its JSON)."""
    sys.path.insert(0, str(ROOT / "bench"))  # process workers import the collate from here
    try:
        spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        out = tmp_path / "shapes.json"
        assert mod.main(["--quick", "--json", str(out), "--dir", str(tmp_path), *args(mod)]) == 0
    finally:
        sys.path.remove(str(ROOT / "bench"))
        sys.modules.pop(name, None)
    return mod, json.loads(out.read_text())


# The default run leaves out the 12-megapixel "phone" shape (16 photos of 4000x3000 decoded three
# times: about half of this test's time on 2 cores); the slow run takes every shape.
BIG = ("phone",)


def _chosen(mod: Any, every: bool) -> list[str]:
    return [s for s in mod.SHAPES if every or s not in BIG]


# SLOW_ONLY: a bench smoke run (14 s in CI); the decode/collate paths it times are covered by
# tests/pipeline, and the peers bench's contenders by test_peers.py::test_contenders_deliver_every_sample
@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("every", [False, True],
                         ids=["without-12mp", "every-shape"])
def test_peers_shapes_quick(tmp_path: Path, every: bool) -> None:
    mod, doc = _run_quick("peers_shapes", tmp_path, lambda mod: ["--shapes", ",".join(_chosen(mod, every))])
    assert doc["quick"] is True and doc["rounds"] == 1 and doc["preliminary"] is True
    assert [s["shape"] for s in doc["shapes"]] == _chosen(mod, every)
    for shape in doc["shapes"]:
        names = [r["name"] for r in shape["rows"]]
        assert names[:2] == ["Loader (threads)", "Loader (processes)"] and names[2] == shape["baseline"]
        for row in shape["rows"]:
            # the DataLoader drops a damaged sample; the Loader refills its batch (on_error="skip")
            dropped = mod.BAD.get(shape["shape"], 0) if row["name"] == shape["baseline"] else 0
            assert row["samples"] == mod.QUICK[shape["shape"]] - dropped, (shape["shape"], row)
            assert math.isfinite(row["samples_per_s"]) and row["samples_per_s"] > 0
            assert row["min"] <= row["samples_per_s"] <= row["max"]
        assert shape["rows"][2]["ratio"] == 1.0
    assert not any(p.name.startswith("peers-shapes-") for p in tmp_path.iterdir())  # cleaned up


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_outside_shapes_quick_batches_equal_the_dataloaders(tmp_path: Path) -> None:
    """bench/outside_shapes.py: every shape packs as README.md says, both Loaders deliver every
    sample, and their batches equal the DataLoader's, value by value."""
    mod, doc = _run_quick("outside_shapes", tmp_path)
    assert [s["shape"] for s in doc["shapes"]] == list(mod.SHAPES)
    for shape in doc["shapes"]:
        assert shape["correct"] is True, (shape["shape"], shape["differences"])
        assert [r["name"] for r in shape["rows"]] == ["Loader (threads)", "Loader (processes)", "DataLoader"]
        for row in shape["rows"]:
            assert row["samples"] == mod.QUICK[shape["shape"]], (shape["shape"], row)
            assert math.isfinite(row["samples_per_s"]) and row["samples_per_s"] > 0
    assert not any(p.name.startswith("outside-shapes-") for p in tmp_path.iterdir())  # cleaned up


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_outside_shapes12_quick_batches_equal_the_dataloaders(tmp_path: Path) -> None:
    """bench/outside_shapes12.py (round 12: token windows, clip folders, COCO, adopted tars, IMU
    windows): both Loaders deliver every sample, batches equal to the DataLoader's."""
    mod, doc = _run_quick("outside_shapes12", tmp_path)
    assert [s["shape"] for s in doc["shapes"]] == list(mod.SHAPES)
    for shape in doc["shapes"]:
        assert shape["correct"] is True, (shape["shape"], shape["differences"])
        for row in shape["rows"]:
            assert row["samples"] == mod.samples(shape["shape"], mod.QUICK[shape["shape"]]), (shape["shape"], row)
    assert not any(p.name.startswith("outside-shapes12-") for p in tmp_path.iterdir())  # cleaned up


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_outside_shapes13_quick_batches_equal_the_dataloaders(tmp_path: Path) -> None:
    """bench/outside_shapes13.py (round 13: 1080p photos cropped, RGB + label + 16-bit depth,
    16-byte records, a JSONL corpus tokenised and padded, JSON + a variable .npz): both Loaders
    deliver every sample, batches equal to the DataLoader's."""
    mod, doc = _run_quick("outside_shapes13", tmp_path)
    assert [s["shape"] for s in doc["shapes"]] == list(mod.SHAPES)
    for shape in doc["shapes"]:
        assert shape["correct"] is True, (shape["shape"], shape["differences"])
        for row in shape["rows"]:
            assert row["samples"] == mod.QUICK[shape["shape"]], (shape["shape"], row)
    assert not any(p.name.startswith("outside-shapes13-") for p in tmp_path.iterdir())  # cleaned up


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_outside_shapes14_quick_batches_equal_the_dataloaders(tmp_path: Path) -> None:
    """bench/outside_shapes14.py (round 14: records and click logs whose small fields are
    columns of the index, six cameras + lidar + calibration, 16-bit CT slices + masks, long
    variable-length series padded per batch): both Loaders' batches equal the DataLoader's."""
    mod, doc = _run_quick("outside_shapes14", tmp_path)
    assert [s["shape"] for s in doc["shapes"]] == list(mod.SHAPES)
    for shape in doc["shapes"]:
        assert shape["correct"] is True, (shape["shape"], shape["differences"])
        for row in shape["rows"]:
            assert row["samples"] == mod.QUICK[shape["shape"]], (shape["shape"], row)
    assert not any(p.name.startswith("outside-shapes14-") for p in tmp_path.iterdir())  # cleaned up


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_outside_newcomer13_quick_batches_equal_the_dataloaders(tmp_path: Path) -> None:
    """bench/outside_newcomer13.py (round 13's newcomers: GPT token blocks from a JSONL corpus,
    LJSpeech-style speech padded per batch): both Loaders' batches equal the DataLoader's."""
    mod, doc = _run_quick("outside_newcomer13", tmp_path)
    assert [s["shape"] for s in doc["shapes"]] == list(mod.SHAPES)
    for shape in doc["shapes"]:
        assert shape["correct"] is True, (shape["shape"], shape["differences"])
        assert len({row["samples"] for row in shape["rows"]}) == 1 and shape["rows"][0]["samples"] > 0
    assert not any(p.name.startswith("outside-newcomer13-") for p in tmp_path.iterdir())  # cleaned up
