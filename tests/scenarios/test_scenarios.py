"""Scenario scripts whose truth is known by construction, each run through `feedline diagnose`.

Every script is an ordinary training script (tests/scenarios/scripts/), run
unchanged as a child process with `--steps`; the JSON report must give the
right verdict, binding stage and findings, and the stage model's prediction
must match the measured step time where stage times are stable.
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from html.parser import HTMLParser
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).parent / "scripts"
SCENARIOS = {
    "slow_read": 30, "slow_decode": 25, "compute_bound": 16, "balanced": 30, "bursty": 40,
    "naive_before": 12, "feedline_loader": 24,
}


def diagnose(out: Path, script: str, steps: int, *extra: str) -> tuple[int, dict, str]:
    """Run `feedline diagnose` on one script; return exit code, JSON report, stderr."""
    json_path = out / f"{script}.json"
    cmd = [sys.executable, "-m", "feedline", "diagnose", "--steps", str(steps),
           "--json", str(json_path), *extra, "--", sys.executable, str(SCRIPTS / f"{script}.py")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=150, check=False)
    data = json.loads(json_path.read_text()) if json_path.exists() else {}
    return proc.returncode, data, proc.stderr


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, dict, str]]:
    out = tmp_path_factory.mktemp("scenarios")
    extra = {"naive_before": ("--html", str(out / "naive.html"), "--trace", str(out / "naive.trace.json")),
             "compute_bound": ("--ab", "--replay", "6")}
    with ThreadPoolExecutor(max_workers=2) as pool:
        futs = {name: pool.submit(diagnose, out, name, steps, *extra.get(name, ()))
                for name, steps in SCENARIOS.items()}
        results = {name: f.result() for name, f in futs.items()}
    results["_dir"] = (0, {"path": str(out)}, "")
    return results


def _ok(runs: dict, name: str) -> dict:
    code, data, err = runs[name]
    assert code == 0, err
    assert data, f"{name}: no JSON report; stderr:\n{err}"
    return data


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("name", "verdict", "binding"), [
    ("slow_read", "data-bound", "read"),
    ("slow_decode", "data-bound", "decode"),
    ("compute_bound", "compute-bound", "gpu"),
    ("balanced", "balanced", None),
    ("bursty", "data-bound", None),
    ("naive_before", "data-bound", None),
    ("feedline_loader", "compute-bound", "gpu"),
])
def test_verdict_and_binding(runs: dict, name: str, verdict: str, binding: str | None) -> None:
    data = _ok(runs, name)
    assert data["verdict"] == verdict, (name, data["stall_fraction"], data["analysis"])
    if binding is not None:
        assert data["binding"] == binding
    assert data["steps"] == SCENARIOS[name] - 1  # the first step (worker start-up) is warm-up
    loader_stage = "read" if name == "feedline_loader" else "fetch"  # Loader spans its own stages
    for stage in ("wait", "step", loader_stage, "collate"):
        st = data["stages"][stage]
        assert st["count"] > 0 and st["p50"] <= st["p95"] <= st["p99"] <= st["max"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["slow_read", "slow_decode", "compute_bound", "naive_before",
                                  "feedline_loader"])
def test_model_prediction_within_10_percent(runs: dict, name: str) -> None:
    a = _ok(runs, name)["analysis"]
    assert abs(a["predicted"] - a["measured"]) <= 0.10 * a["measured"], a


@pytest.mark.timeout(300)
def test_serial_loader_gets_num_workers_finding_with_fix(runs: dict) -> None:
    for name in ("slow_read", "slow_decode", "naive_before"):
        data = _ok(runs, name)
        codes = {f["code"]: f for f in data["findings"]}
        assert "num-workers-zero" in codes, codes
        fix = codes["num-workers-zero"]["fix"]
        assert "num_workers=" in fix and "persistent_workers=True" in fix
        assert "pin_memory" not in fix  # a CPU run: no pinning advice without a GPU
        assert data["predicted_gain"] > 1.3
    assert "batch_size=64" in {f["code"]: f for f in _ok(runs, "naive_before")["findings"]}[
        "num-workers-zero"]["fix"]


@pytest.mark.timeout(300)
def test_compute_bound_has_no_data_findings(runs: dict) -> None:
    data = _ok(runs, "compute_bound")
    assert not [f for f in data["findings"] if f["severity"] == "high"], data["findings"]
    assert data["stall_fraction"] < 0.15
    assert data["predicted_gain"] == 1.0


@pytest.mark.timeout(300)
def test_bursty_tail_is_reported_although_the_mean_looks_fine(runs: dict) -> None:
    data = _ok(runs, "bursty")
    wait = data["stages"]["wait"]
    assert wait["p99"] > 3 * wait["p50"] and wait["p99"] > 0.5 * data["step_time"]["p50"]
    assert "tail-stalls" in {f["code"] for f in data["findings"]}
    # The model fed with means predicts a much faster step than measured: averages hide the tail.
    assert data["analysis"]["steady"] < 0.8 * data["analysis"]["measured"]


@pytest.mark.timeout(300)
def test_the_synthetic_batch_check_runs_only_when_asked(runs: dict) -> None:
    data = _ok(runs, "compute_bound")
    ab = data["ab"]
    # --replay 6: six replayed steps, the first warm-up, after the 16 measured ones (15 and
    # the warm-up: test_verdict_and_binding), and the run ends there
    assert ab is not None and ab["steps"] == 5 and ab["statistic"] == "mean"
    assert ab["with_data_path"] == pytest.approx(data["step_time"]["mean"], rel=1e-6)
    assert 0.7 < ab["ratio"] < 1.3, ab  # compute-bound: removing the data path changes little
    assert _ok(runs, "slow_read")["ab"] is None  # never without --ab


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.imgs: list[str] = []
        self.tags: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        if tag == "img":
            self.imgs.append(dict(attrs).get("src") or "")


@pytest.mark.timeout(300)
def test_html_and_trace_files_open(runs: dict) -> None:
    _ok(runs, "naive_before")
    out = Path(runs["_dir"][1]["path"])
    parser = _Collect()
    parser.feed((out / "naive.html").read_text())
    assert {"table", "img", "section"} <= parser.tags
    assert len(parser.imgs) >= 2 and all(s.startswith("data:image/png;base64,") for s in parser.imgs)
    trace = json.loads((out / "naive.trace.json").read_text())
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    names = {e["name"] for e in xs}
    assert {"wait", "step", "fetch", "collate"} <= names
    assert all(e["dur"] >= 0 and {"ts", "pid", "tid"} <= e.keys() for e in xs)


@pytest.mark.timeout(300)
def test_workers_fetches_are_timed_inside_worker_processes(runs: dict) -> None:
    data = _ok(runs, "compute_bound")
    assert data["loader"]["num_workers"] == 1
    assert data["stages"]["fetch"]["count"] >= SCENARIOS["compute_bound"] - 1
