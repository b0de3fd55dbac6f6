"""Smoke test: ``feedline demo`` at a tiny size, end to end (no timing asserted)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from feedline.cli.main import main

TINY_ARGS = ["--frames", "16", "--steps", "3", "--batch-size", "4", "--width", "64",
             "--height", "48", "--lidar-points", "200", "--workers", "2", "--device", "cpu"]


@pytest.mark.timeout(300)
def test_demo_runs_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, report, html = tmp_path / "work", tmp_path / "demo.json", tmp_path / "demo.html"
    main(["demo", *TINY_ARGS, "--out", str(out), "--json", str(report), "--html", str(html)])
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
    page = html.read_text()
    assert page.startswith("<!DOCTYPE html>") and "before" in page and "after" in page
    assert (out / "packed" / "manifest.json").exists() and (out / "raw").is_dir()


def test_bad_option_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["demo", "--frames", "4", "--batch-size", "8", "--out", str(tmp_path)])
    assert e.value.code == 2
    assert "batch_size" in capsys.readouterr().err
    assert not (tmp_path / "raw").exists()


def test_temp_work_dir_is_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    main(["demo", *TINY_ARGS, "--steps", "1"])
    assert (tmp_path / "feedline-demo.html").exists()
    assert not list(tmp_path.glob("feedline-demo-*")), "the temporary work dir is removed"
