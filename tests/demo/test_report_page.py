"""The demo's HTML page: result first, labelled timeline window, readable
histograms, "compute" on CPU, no negative stall."""

from __future__ import annotations

import base64
import dataclasses
import io
import itertools
import re
from pathlib import Path

import pytest
from PIL import Image

import feedline
from feedline.observe._stats import Span
from feedline.observe.report_html import histograms_png, timeline_png, timeline_window, write_html


def _cpu_report(name: str = "after"):
    """A real watched CPU loop over a real Loader (map-style dataset, 2 threads)."""
    import numpy as np

    class Squares:
        def __len__(self) -> int:
            return 64

        def __getitem__(self, i: int) -> dict:
            return {"x": np.full((32, 32), i, np.float32), "cls": i % 4}

    loader = feedline.Loader(Squares(), batch_size=8, workers=2, seed=0)
    w = feedline.watch(loader, device="cpu", name=name)
    for batch in w:
        float((batch["x"] @ batch["x"]).sum())
    return w.report()


@pytest.fixture(scope="module")
def report():
    return _cpu_report()


def test_headline_first_and_cpu_words(report, tmp_path: Path) -> None:
    odd = dataclasses.replace(report, binding="gpu", stall_fraction=-0.012)
    page = write_html([odd], tmp_path / "r.html", title="t",
                      headline=["Speedup 1.50x: 10.0 -> 15.0 samples/s", "second line"]).read_text()
    assert page.index("Speedup 1.50x") < page.index("<section")
    assert "<b>Speedup 1.50x: 10.0 -&gt; 15.0 samples/s</b>" in page
    assert "binding stage: compute" in page and "compute busy" in page
    assert "GPU busy" not in page and ">gpu<" not in page
    assert "Data stall 0%" in page and "-1%" not in page
    assert re.search(r"Timeline: (all|first) [0-9.]+ (ms|s)", page)


def test_timeline_window_says_what_it_shows(report) -> None:
    assert timeline_window(report, max_seconds=1e6).startswith("all ")
    part = timeline_window(report, max_seconds=1e-3)
    assert part.startswith("first 1 ms of "), part


def test_histograms_wrap_to_readable_panels(report) -> None:
    png = Image.open(io.BytesIO(base64.b64decode(histograms_png(report))))
    stages = len({s.stage for s in report.spans})
    cols = min(3, stages)
    assert stages >= 3
    assert png.width / cols >= 280, (png.size, stages)  # each panel at least ~280 px wide
    assert png.width <= 1100


def test_back_to_back_steps_stay_apart_on_the_timeline(report) -> None:
    """A compute-bound run's steps follow each other with no gap: drawn in one colour they
    were one solid bar. Every other span of a row is a lighter shade."""
    steps = [Span("step", i * 0.1, (i + 1) * 0.1, 1, 1, {}) for i in range(10)]
    png = Image.open(io.BytesIO(base64.b64decode(timeline_png(
        dataclasses.replace(report, spans=steps, timeline=[]))))).convert("RGB")
    pixels = png.load()

    def shade(c: tuple[int, int, int]) -> str | None:  # the step colour #2ca02c, lighter, other
        r, g, _ = c
        return "dark" if g - r > 80 else "light" if g - r > 40 else None

    y = max(range(png.height), key=lambda r: sum(shade(pixels[x, r]) == "dark" for x in range(png.width)))
    along = [s for s in (shade(pixels[x, y]) for x in range(png.width)) if s is not None]
    runs = 1 + sum(a != b for a, b in itertools.pairwise(along))
    assert runs == 10, runs
