from __future__ import annotations

import dataclasses
import json
import math

import pytest
from rich.console import Console

from feedline.demo.table import RunFigures, comparison, render, to_json

BEFORE = RunFigures(
    name="before", loader="DataLoader(num_workers=0)", device="cpu", steps=10, batch_size=8,
    step_p50_s=0.2, step_p95_s=0.3, stall_fraction=0.6, utilisation=0.4,
    utilisation_of="compute", samples_per_s=40.0, h2d_per_batch_s=0.001,
    verdict="data-bound", binding="decode", wall_s=2.0, first_loss=1.0, last_loss=0.5,
)
AFTER = dataclasses.replace(
    BEFORE, name="after", loader="feedline.Loader", step_p50_s=0.1, step_p95_s=0.12,
    stall_fraction=0.05, utilisation=0.95, samples_per_s=100.0, h2d_per_batch_s=None,
    verdict="compute-bound", binding="gpu",
)


def test_speedup_is_the_measured_ratio() -> None:
    c = comparison(BEFORE, AFTER)
    assert c.speedup == pytest.approx(100.0 / 40.0)
    assert c.step_speedup == pytest.approx(2.0)
    slower = dataclasses.replace(AFTER, samples_per_s=20.0)
    assert comparison(BEFORE, slower).speedup == pytest.approx(0.5)


def test_render_shows_every_row() -> None:
    console = Console(record=True, width=160)
    render(comparison(BEFORE, AFTER), console)
    text = console.export_text()
    for word in ("step time p50", "step time p95", "data-stall fraction",
                 "compute utilisation", "samples/s", "H2D time per batch", "verdict",
                 "data-bound (decode)", "compute-bound (compute)", "2.50x", "200.00 ms", "n/a (no copy)"):
        assert word in text, word


def test_json_is_strict_and_complete() -> None:
    odd = dataclasses.replace(AFTER, first_loss=math.nan)
    data = to_json(comparison(BEFORE, odd), frames=64)
    text = json.dumps(data, allow_nan=False)
    back = json.loads(text)
    assert back["speedup"] == pytest.approx(2.5)
    assert back["before"]["verdict"] == "data-bound"
    assert back["after"]["first_loss"] is None
    assert back["frames"] == 64


def test_runs_must_match() -> None:
    with pytest.raises(ValueError, match="same steps"):
        comparison(BEFORE, dataclasses.replace(AFTER, steps=11))


def test_gpu_binding_keeps_its_name_on_cuda() -> None:
    console = Console(record=True, width=160)
    on_gpu = dataclasses.replace(AFTER, device="cuda", utilisation_of="GPU")
    render(comparison(dataclasses.replace(BEFORE, device="cuda", utilisation_of="GPU"), on_gpu),
           console)
    text = console.export_text()
    assert "compute-bound (gpu)" in text and "GPU utilisation" in text
    assert "nothing crosses PCIe" not in text


def test_rounding_size_negative_stall_reads_zero() -> None:
    console = Console(record=True, width=160)
    render(comparison(BEFORE, dataclasses.replace(AFTER, stall_fraction=-1e-5)), console)
    text = console.export_text()
    assert "-0%" not in text and " 0%" in text
