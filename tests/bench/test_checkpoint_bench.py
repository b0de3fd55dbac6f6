"""Smoke test of bench/checkpoint.py at --quick size: it runs and writes well-formed results
(no timing assertions: the machine is shared)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(240)
def test_quick_run_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "o.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "checkpoint.py"), "--quick", "--repeat", "1",
                           "--dir", str(tmp_path), "--json", str(out)],
                          capture_output=True, text=True, timeout=230, check=False, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert set(doc["saves"]) == {"torch.save", "dcp.save", "dcp.async_save", "dcp.async_save+feedline",
                                 "Checkpointer.save"}
    for row in doc["saves"].values():
        assert 0 < row["blocked_s"] <= row["durable_s"] and len(row["blocked_runs"]) == 1
    ours = doc["saves"]["Checkpointer.save"]
    assert ours["staging_allocations"] == 1
    [rnd] = ours["rounds"]  # per round: the loop's CPU in save() and its wait for a core, to explain outliers
    assert rnd["cpu_s"] > 0 and (rnd["runq_wait_s"] is None or rnd["runq_wait_s"] >= 0)
    assert ours["blocked_cpu_s"] > 0 and "waiting for a core" in proc.stdout
    assert doc["write"]["feedline_MBps"] > 0 and doc["write"]["dd_MBps"] > 0
    assert doc["write"]["feedline_over_MBps"] > 0 and doc["write"]["dd_over_MBps"] > 0  # over a recycled file
    loop = doc["loop"]
    assert loop["segment_plain_s"] > 0 and loop["segment_saving_s"] > 0 and len(loop["pair_ratios"]) == 2
    assert len(loop["blocked_runs"]) == 2 and 0 < loop["floor_s"] < loop["segment_plain_s"]
    assert loop["memcpy_GBps"] > 0 and loop["first_save_s"]["without_reserve"] > 0
    # the figures less exposed to other processes: per pair without waits for a core, per save attributed
    assert len(loop["pair_ratios_on_core"]) == 2 and all(r > 0 for r in loop["pair_ratios_on_core"])
    assert loop["ratio_spread"] == [min(loop["pair_ratios"]), max(loop["pair_ratios"])]
    assert [s["kind"] for s in loop["segments"]] == ["A", "B", "B", "A"]
    assert all(len(s["steps_s"]) == loop["save_every"] for s in loop["segments"])
    assert len(loop["attributed_runs_pct"]) == 2 and "waits for a core" in proc.stdout
    assert all(s["blocked_cpu_s"] > 0 and s["writer_cpu_s"] > 0 for s in loop["saves"])
    assert len(doc["comparisons"]) == 7 and all(math.isfinite(c["ratio"]) and c["ratio"] > 0
                                                 for c in doc["comparisons"])
    small = doc["small"]
    assert small["tensors"] == 2000 and small["payload_bytes"] <= small["data_bytes"] < small["page_each_bytes"] / 10
    assert 0 < small["blocked_s"] <= small["durable_s"] and small["load_s"] > 0
    assert "blocked per save" in proc.stdout and "tiny tensors" in proc.stdout
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("bench-checkpoint-")]  # cleaned up


@pytest.mark.timeout(60)
def test_only_names_unknown_sections(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The argument check, in this interpreter (the quick run above is the bench as a process)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_checkpoint", ROOT / "bench" / "checkpoint.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    with pytest.raises(SystemExit) as e:
        bench.main(["--only", "loop,nope", "--dir", str(tmp_path)])
    assert e.value.code == 2 and "unknown sections ['nope']" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # refused before any work


@pytest.mark.timeout(60)
def test_device_cuda_without_cuda_says_so(tmp_path: Path) -> None:
    # the GPU check's checkpoint row on a host without CUDA (before: "Torch not compiled with
    # CUDA enabled" from inside the bench, after it had made its scratch folder)
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is here: the GPU check runs this row")
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_checkpoint_ev1415", ROOT / "bench" / "checkpoint.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    threads = torch.get_num_threads()
    try:
        with pytest.raises(SystemExit, match="--device cuda needs CUDA"):
            bench.main(["--device", "cuda", "--quick", "--dir", str(tmp_path)])
    finally:
        torch.set_num_threads(threads)  # main() sets 1 (left at 1, later tests' states differed)
    assert list(tmp_path.iterdir()) == []  # its scratch folder went too
