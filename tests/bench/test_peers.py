"""Smoke tests of bench/peers.py without the peers installed: the table is written, the
peers that are not installed are reported as such (never dropped), and every contender
that runs here delivers every sample of a workload once. No timing assertions (the
machine is shared)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def bench() -> Iterator[dict[str, ModuleType]]:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        mods = {}
        for name in ("peers_data", "peers_contenders", "peers"):
            spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
            assert spec is not None and spec.loader is not None
            mods[name] = importlib.util.module_from_spec(spec)
            sys.modules[name] = mods[name]
            spec.loader.exec_module(mods[name])
        yield mods
    finally:
        sys.path.remove(str(ROOT / "bench"))
        for name in ("peers_data", "peers_contenders", "peers"):
            sys.modules.pop(name, None)


def _finite(stats: dict[str, float]) -> bool:
    return all(math.isfinite(v) and v > 0 for v in stats.values()) and \
        stats["min"] <= stats["median"] <= stats["max"]


# SLOW_ONLY: a whole quick bench run (11 s in CI); each contender delivering every sample is
# test_contenders_deliver_every_sample (default), the figures' child protocol the test below
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_peers_quick_reports_missing_peers(bench: dict[str, ModuleType], tmp_path: Path) -> None:
    out, md = tmp_path / "peers.json", tmp_path / "peers.md"
    # the cheap contenders that always run here, and the peers (absent from .venv)
    names = ["feedline Loader (threads)", "torch DataLoader (files)", "torchdata.nodes", "SPDL",
             "MosaicML Streaming", "LitData"]
    rc = bench["peers"].main(["--quick", "--workloads", "W1,W3", "--contenders", ",".join(names),
                              "--json", str(out),
                              "--markdown", str(md), "--dir", str(tmp_path),
                              "--peers-dir", str(tmp_path / "no-peers-here")])
    assert rc == 0
    doc: dict[str, Any] = json.loads(out.read_text())
    assert doc["preliminary"] is True and doc["quick"] is True and doc["rounds"] == 1
    assert set(doc["workloads"]) == {"W1", "W3"}
    contenders = bench["peers_contenders"]
    for key, result in doc["workloads"].items():
        rows = {r["name"]: r for r in result["rows"]}
        assert list(rows) == names  # every contender asked for has a row
        for name, row in rows.items():
            absent = [m for m in contenders.REQUIRES[name] if importlib.util.find_spec(m) is None]
            if absent:
                assert row["status"].startswith("not installed") and "samples_per_s" not in row
            else:
                assert row["status"] == "ok", (key, name, row["status"])
                assert _finite(row["samples_per_s"]) and _finite(row["peak_rss_mb"])
                assert _finite(row["first_batch_s"]) and row["runs"] == 1
                assert _finite(row["samples_per_cpu_s"])  # CPU of the whole process tree
        ours = {g["ours"] for g in result["goals"]}
        assert ours == {"feedline Loader (threads)"}
        assert all(g["ratio"] > 0 and isinstance(g["meets_goal"], bool) for g in result["goals"])
    w1 = doc["workloads"]["W1"]
    assert w1["decode_ceiling"]["samples_per_s"]["median"] > 0
    assert w1["decode_ceiling"]["threads"] == 2  # the contenders' workers
    assert _finite(w1["decode_ceiling"]["one_core_samples_per_s"])
    assert _finite(w1["linear_bound"]["samples_per_s"])
    ran = [r["name"] for r in w1["rows"] if r["status"] == "ok"]
    assert [e["name"] for e in w1["decode_efficiency"]] == ran
    assert all(e["of_ceiling"] > 0 and e["of_linear_bound"] > 0 and e["cpu_efficiency"] > 0
               for e in w1["decode_efficiency"])
    assert "decode_efficiency" not in doc["workloads"]["W3"] or \
        doc["workloads"]["W3"]["decode_efficiency"] == []
    assert any(g["goal"] == "samples/s vs the best torch DataLoader"
               for g in doc["workloads"]["W3"]["goals"])
    text = md.read_text()
    assert "| torchdata.nodes | not installed" in text or importlib.util.find_spec("torchdata")
    assert "decode ceiling: bare decode on 2 threads" in text and "linear bound" in text
    assert "samples per CPU-s" in text


@pytest.mark.timeout(300)
@pytest.mark.parametrize("key", ["W1", "W2", "W3", "W4"])
def test_contenders_deliver_every_sample(bench: dict[str, ModuleType], tmp_path: Path,
                                         key: str) -> None:
    """Each contender that runs here (thread/in-process ones, one worker) gives every sample
    of one shuffled epoch once, with the same decoded values and labels."""
    data, contenders = bench["peers_data"], bench["peers_contenders"]
    w = data.workloads(quick=True)[key]
    w = dataclasses.replace(w, n=min(w.n, 40), batch=16 if w.n > 16 else 5)
    data.build(tmp_path, w, mds=False, lit=False)
    expected = {i: data.encode(w, arr) for i, arr in data._arrays(w)}
    want_sum = sum(float(contenders.decode(w.field, b).astype(np.float64).sum())
                   for b in expected.values())
    for name in ("feedline Loader (threads)", "torch DataLoader (files)",
                 "torch DataLoader (ds[i])", "torchdata.nodes", "SPDL"):
        if contenders.missing(name):
            continue
        workers = 0 if name.startswith("torch DataLoader") else 1
        runner = contenders.make(name, w, tmp_path, workers)
        try:
            batches = list(runner.epoch(0))
        finally:
            runner.close()
        assert sum(contenders.batch_len(b) for b in batches) == w.n, name
        if isinstance(batches[0], dict):
            xs = [b[w.field].numpy() for b in batches]
            ys = [b["cls"].numpy() for b in batches] if w.label else []
        elif w.label:
            xs, ys = [b[0].numpy() for b in batches], [b[1].numpy() for b in batches]
        else:
            xs, ys = [b.numpy() for b in batches], []
        assert xs[0].shape[1:] == w.shape, name
        got = sum(float(x.astype(np.float64).sum()) for x in xs)
        assert got == pytest.approx(want_sum, rel=1e-6), name
        if w.label:
            assert sorted(np.concatenate(ys).tolist()) == sorted(i % 1000 for i in range(w.n))


@pytest.mark.timeout(60)
def test_a_child_that_dies_after_its_figures_keeps_them_marked(
        bench: dict[str, ModuleType], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A contender process that prints its figures and then dies (torchdata.nodes on W4 ends
    in std::terminate at teardown) keeps its figures with a note; one that dies before
    printing them is an error."""
    peers, data = bench["peers"], bench["peers_data"]
    figures = {"samples": 10, "seconds": 0.5, "cpu_s": 0.25, "first_batch_s": 0.1, "note": ""}
    after = tmp_path / "after.py"
    after.write_text(f"import json, os\nprint(json.dumps({figures!r}), flush=True)\nos.abort()\n")
    before = tmp_path / "before.py"
    before.write_text("import os, sys\nprint('dying', file=sys.stderr, flush=True)\nos.abort()\n")
    args = peers.parser().parse_args(["--peers-dir", str(tmp_path)])
    w = data.workloads(quick=True)["W3"]
    monkeypatch.setattr(peers, "HERE", after)
    kept = peers.run_child("x", w, tmp_path, args, 30.0)
    assert "error" not in kept and kept["samples_per_s"] == 20.0
    assert kept["samples_per_cpu_s"] == 40.0 and "exited with code -6" in kept["note"]
    monkeypatch.setattr(peers, "HERE", before)
    lost = peers.run_child("x", w, tmp_path, args, 30.0)
    assert lost["error"] == "dying"
