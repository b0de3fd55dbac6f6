"""Smoke test: ``feedline demo`` at a tiny size, end to end (no timing asserted)."""

from __future__ import annotations

import json
import math
import tempfile
import warnings
from pathlib import Path

import pytest

from feedline.cli.main import main
from feedline.demo.story import DemoConfig, _work_dir

TINY_ARGS = ["--frames", "16", "--steps", "3", "--batch-size", "4", "--width", "64",
             "--height", "48", "--lidar-points", "200", "--workers", "2", "--device", "cpu"]


@pytest.mark.timeout(300)
def test_demo_runs_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the default work dir goes here
    report, html = tmp_path / "demo.json", tmp_path / "demo.html"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        main(["demo", *TINY_ARGS, "--json", str(report), "--html", str(html)])
    # the demo's model takes lidar sweeps as lists on purpose: the Loader's advice to make
    # them one size was printed on every demo run, pointing into the demo's own code
    assert not [w for w in caught if "lidar" in str(w.message)], [str(w.message)[:80] for w in caught]
    text = capsys.readouterr().out
    for row in ("step time p50", "step time p95", "data-stall fraction", "samples/s",
                "H2D time per batch", "verdict", "speedup"):
        assert row in text, row
    data = json.loads(report.read_text())
    assert isinstance(data["speedup"], float) and math.isfinite(data["speedup"])
    for run in ("before", "after"):
        figures = data[run]
        assert figures["steps"] == 3 and figures["batch_size"] == 4
        assert figures["step_p50_s"] > 0 and figures["samples_per_s"] > 0
        assert figures["verdict"] in ("data-bound", "compute-bound", "balanced")
    assert data["speedup"] == pytest.approx(
        data["after"]["samples_per_s"] / data["before"]["samples_per_s"])
    assert isinstance(data["host_contended"], bool)
    for run in ("before", "after"):
        host = data["host"][run]
        assert host["cores"] >= 1 and host["seconds"] > 0
        assert host["contended"] == bool(host["reasons"])
    assert ("busy host during" in text) == data["host_contended"]
    page = html.read_text()
    assert page.startswith("<!DOCTYPE html>") and "before" in page and "after" in page
    assert page.index("Speedup ") < page.index("<section") and "samples/s" in page
    assert "compute busy" in page and "GPU busy" not in page
    assert not list(tmp_path.glob("feedline-demo-*")), "the temporary work dir is removed"


def test_work_dir_kept_or_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with _work_dir(DemoConfig(out=tmp_path / "mine")) as work:
        (work / "f").write_text("x")
    assert (tmp_path / "mine" / "f").exists()
    with _work_dir(DemoConfig(keep=True)) as work:
        (work / "f").write_text("x")
    assert (work / "f").exists()
    with _work_dir(DemoConfig()) as work:
        (work / "f").write_text("x")
    assert not work.exists()


def test_bad_option_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["demo", "--frames", "4", "--batch-size", "8", "--out", str(tmp_path)])
    assert e.value.code == 2
    assert "batch_size" in capsys.readouterr().err
    assert not (tmp_path / "raw").exists()


@pytest.mark.timeout(300)
def test_json_dash_prints_only_json_on_stdout(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """In this interpreter (the CLI front is tested as a process in tests/cli), with stdout
    captured at the file descriptor: whatever the demo or its workers write to fd 1 is seen."""
    main(["demo", *TINY_ARGS, "--out", str(tmp_path / "w"), "--json", "-"])
    out, err = capfd.readouterr()
    data = json.loads(out)  # nothing but the JSON on stdout
    assert data["before"]["steps"] == 3 and "host_contended" in data
    assert "step time p50" in err and (tmp_path / "w" / "report.html").exists()
