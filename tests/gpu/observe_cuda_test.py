"""GPU checks of feedline.observe (collected only with FEEDLINE_GPU=1; they FAIL without CUDA).

Run: FEEDLINE_GPU=1 .venv/bin/pytest -q tests/gpu/observe_cuda_test.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import feedline

SCRIPTS = Path(__file__).resolve().parents[1] / "scenarios" / "scripts"


def _need_cuda() -> None:
    assert torch.cuda.is_available(), "these tests need a CUDA GPU (run through bench/gpu_check.py)"


def _diagnose(tmp_path: Path, script: str, steps: int, *extra: str) -> dict:
    out = tmp_path / f"{script}.json"
    cmd = [sys.executable, "-m", "feedline", "diagnose", "--steps", str(steps), "--json", str(out),
           "--device", "cuda:0", *extra, "--", sys.executable, str(SCRIPTS / f"{script}.py")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=200, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text())


@pytest.mark.timeout(240)
def test_h2d_bound_scenario(tmp_path: Path) -> None:
    _need_cuda()
    data = _diagnose(tmp_path, "h2d_bound", 30)
    assert data["verdict"] == "data-bound", data["analysis"]
    assert data["binding"] == "h2d"
    assert "pageable-copy" in {f["code"] for f in data["findings"]}
    assert data["copies"]["pageable"] >= 29 and data["copies"]["bytes"] >= 29 * (64 << 20)
    h2d = data["stages"]["h2d"]
    assert h2d["count"] >= 29 and h2d["p50"] > 0.0005  # 64 MiB cannot cross PCIe in < 0.5 ms


@pytest.mark.timeout(240)
def test_naive_script_on_gpu_reports_serial_loader_and_pageable_copies(tmp_path: Path) -> None:
    _need_cuda()
    data = _diagnose(tmp_path, "naive_before", 12)
    codes = {f["code"] for f in data["findings"]}
    assert data["verdict"] == "data-bound"
    assert {"num-workers-zero", "pageable-copy"} <= codes
    assert "gpu" in data["stages"] and data["device"] == "cuda"


def _matmul_step(a: torch.Tensor, reps: int) -> None:
    for _ in range(reps):
        a = a @ a
        a = a / a.norm()


@pytest.mark.timeout(240)
def test_watch_times_the_gpu_with_events_and_calls_it_compute_bound() -> None:
    _need_cuda()
    a = torch.randn(4096, 4096, device="cuda")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    _matmul_step(a, 20)
    torch.cuda.synchronize()
    truth = time.perf_counter() - t0
    data = TensorDataset(torch.randn(64 * 40, 256))
    loader = DataLoader(data, batch_size=64, num_workers=2, pin_memory=True)
    w = feedline.watch(loader, device="cuda:0")
    for (x,) in w:
        x = x.to("cuda", non_blocking=True)
        _matmul_step(a, 20)
    rep = w.report()
    assert rep.verdict == "compute-bound", rep.analysis
    assert rep.gpu_utilisation is not None and rep.gpu_utilisation > 0.8
    # CUDA-event time of the step agrees with a synchronised measurement of the same work
    assert abs(rep.stages["gpu"].p50 - truth) < 0.25 * truth
    assert rep.copies["blocking_from_pinned"] == 0 and rep.copies["pinned"] >= 39
    assert rep.stages["pin"].count >= 39  # the DataLoader's pin-memory thread is timed
    assert not {"pinned-blocking-copy", "pageable-copy"} & {f.code for f in rep.findings}


@pytest.mark.timeout(240)
def test_pinned_memory_without_non_blocking_is_found() -> None:
    _need_cuda()
    loader = DataLoader(TensorDataset(torch.randn(64 * 20, 4096)), batch_size=64, num_workers=1,
                        pin_memory=True)
    w = feedline.watch(loader, device="cuda:0")
    for (x,) in w:
        x = x.to("cuda")
        x.sum()
    rep = w.report()
    f = next(f for f in rep.findings if f.code == "pinned-blocking-copy")
    assert "non_blocking=True" in f.fix


@pytest.mark.timeout(240)
def test_synthetic_batch_replay_keeps_the_batch_in_device_memory() -> None:
    _need_cuda()
    loader = DataLoader(TensorDataset(torch.randn(64 * 200, 4096)), batch_size=64, num_workers=0)
    w = feedline.watch(loader, device="cuda:0", steps=10, ab=True, replay=6)
    seen = []
    for (x,) in w:
        seen.append(x.to("cuda").data_ptr())
        (x.to("cuda") * 2).sum()
    rep = w.report()
    assert rep.ab is not None and rep.ab["steps"] == 5
    assert len(set(seen[11:])) == 1  # replayed steps reuse one device copy: no new H2D
    assert rep.copies["count"] == 2 * 10  # only the measured steps copied


@pytest.mark.timeout(240)
def test_loader_h2d_time_comes_from_its_copy_stream_events(tmp_path: Path) -> None:
    """The Loader's h2d spans carry the copy stream's CUDA events; the report uses their
    device time (``host_s`` keeps the host time around the asynchronous send)."""
    _need_cuda()

    class Big:
        def __len__(self) -> int:
            return 64 * 12

        def __getitem__(self, i: int) -> dict:
            return {"x": torch.full((256, 1024), float(i))}  # 1 MiB per sample

    loader = feedline.Loader(Big(), batch_size=64, device="cuda:0", workers=2, shuffle=False)
    w = feedline.watch(loader, device="cuda:0")
    for batch in w:
        (batch["x"] * 2).sum()
    rep = w.report()
    loader.close()
    h2d = [s for s in rep.spans if s.stage == "h2d"]
    assert len(h2d) >= 11 and all("events" not in s.attrs for s in h2d)
    timed = [s for s in h2d if "host_s" in s.attrs]
    assert len(timed) == len(h2d)
    # 64 MiB per batch over PCIe takes milliseconds on the device; the async send returns sooner
    assert sorted(s.duration for s in timed)[len(timed) // 2] > 1e-3
    assert rep.stages["h2d"].count == len(h2d)
