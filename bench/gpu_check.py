"""The one GPU check: every GPU test and GPU benchmark in one go, within a time budget.

Run it on a CUDA machine from the repository root (the lent H200 has no network;
carry the wheels that ``bench/gpu_wheels.sh`` downloads here)::

    python3 bench/gpu_check.py --wheels .whl --out "$OUT"

Steps, most valuable first: ``preflight`` (torch/CUDA/MIG, which optional
packages import, GDS status), ``tests`` (``pytest tests/gpu``), then each GPU
benchmark. Each step runs in its own process group with its own timeout, cut
to what is left of ``--budget`` (default 480 s), and is killed with its
children (loader workers) when it overruns. After every step the summary is
rewritten, so a crash or a kill later never loses the steps already done.

Under ``--out`` it writes four files (the device tool brings back at most 8):
``gpu_check.json`` (environment, per-step status, test counts and failures,
each benchmark's JSON), ``gpu_check.log`` (every step's output) and
``gpu_tests.xml`` / ``gpu_tests_slow.xml`` (JUnit of the two test steps: the
quick data-path checks first, the whole-program ones after the main benchmarks).
It ends with a summary table.

Without CUDA it runs nothing: it writes the summary with
``"cuda_available": false`` and exits 2, so a missing GPU is never mistaken
for a pass. ``--dry-run`` runs the same plumbing on any machine: the preflight,
``pytest --collect-only tests/gpu`` (every GPU test module imports) and each
benchmark's exact command line with ``--help`` appended (the script imports and
parses its arguments). ``--only a,b`` runs a subset (a rerun after a partial
result).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MIN_STEP_S = 15.0  # a step is not started with less of the budget left
LOG_CAP = 12 << 20  # the device tool brings back files of at most 16 MiB

# Optional packages the GPU steps use, and what lacks when one does not import.
OPTIONAL = {
    "simplejpeg": "JPEG tests and gpu_decode/loader_jpeg (carry its wheel: bench/gpu_wheels.sh)",
    "torchvision": "GPU JPEG decode (torchvision.io.decode_jpeg on cuda)",
    "kvikio": "io='gds' tests and read_gds/checkpoint GDS rows (carry kvikio-cu13: bench/gpu_wheels.sh)",
    "webdataset": "the WebDataset contender of loader_jpeg_many_cores (carry it: bench/gpu_wheels.sh)",
    "nvidia.nvimgcodec": "the nvImageCodec decoder row of gpu_decode (optional)",
    "pynvml": "SM and PCIe sampling in diagnose (optional)",
    "pytest": "the tests step",
    "pytest_timeout": "per-test timeouts in the tests step",
    "hypothesis": "tests/conftest.py",
}


@dataclass
class Step:
    """One command of the check."""

    name: str
    argv: list[str]
    timeout: float
    kind: str = "bench"  # "tests" | "bench"
    result: dict[str, Any] = field(default_factory=dict)


# (name, script, extra arguments, timeout s, device). Each script accepts --device and --json PATH.
GPU_BENCHES: list[tuple[str, str, list[str], float, str]] = [
    ("gpu_decode", "bench/gpu_decode.py", ["--repeat", "3"], 180, "cuda"),
    ("loader_h2d", "bench/loader_h2d.py", ["--repeat", "3"], 90, "cuda"),
    # {scratch}: a folder on the machine's disk (GDS cannot read tmpfs, which /tmp may be)
    ("read_gds", "bench/read_gds.py", ["--repeat", "3", "--dir", "{scratch}"], 90, "cuda"),
    ("checkpoint", "bench/checkpoint.py", ["--repeat", "3", "--dir", "{scratch}"], 90, "cuda"),
    ("diagnose_overhead", "bench/diagnose_overhead.py", ["--repeat", "3"], 90, "cuda"),
    ("demo", "-m", ["feedline", "demo"], 90, "cuda"),
    # not a GPU bench: the JPEG loader goals (1.5x vs DataLoader / WebDataset) on a host
    # with many cores, since 2 cores cap them (see the ceiling line it prints)
    ("loader_jpeg_many_cores", "bench/loader_jpeg.py", ["--repeat", "3"], 120, "cpu"),
]


def bench_argv(script: str, extra: list[str], json_path: Path, device: str) -> list[str]:
    """The command line of one benchmark (``-m`` runs a module: the demo CLI)."""
    extra = [str(json_path.parent) if a == "{scratch}" else a for a in extra]
    if script == "-m":
        return [sys.executable, "-m", *extra, "--device", device, "--json", str(json_path)]
    return [sys.executable, script, "--device", device, *extra, "--json", str(json_path)]


def child_env(site: str | None) -> dict[str, str]:
    """The steps' environment: FEEDLINE_GPU=1, unbuffered, src (and carried wheels) importable."""
    env = dict(os.environ)
    env["FEEDLINE_GPU"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    paths = [str(ROOT / "src"), str(ROOT / "bench")] + ([site] if site else [])
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def install_wheels(folder: Path, log: Any, into: Path) -> tuple[str | None, dict[str, Any]]:
    """``pip install --no-index --no-deps --target into/site`` every wheel in ``folder``;
    returns that site folder (``None`` when nothing was installed) and what happened."""
    wheels = sorted(str(p) for p in folder.glob("*.whl")) if folder.is_dir() else []
    if not wheels:
        return None, {"ok": False, "error": f"no wheels in {folder}"}
    site = str(into / "site")
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
           "--no-cache-dir", "--upgrade", "--target", site, *wheels]
    log.write(f"\n$ {' '.join(cmd)}\n")
    log.flush()
    try:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=120).returncode
    except subprocess.TimeoutExpired:
        rc = 124
    info = {"ok": rc == 0, "rc": rc, "wheels": [Path(w).name for w in wheels]}
    if rc != 0:
        return None, info
    sys.path.insert(0, site)
    importlib.invalidate_caches()
    return site, info


def _nvidia_smi() -> str | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name,driver_version,memory.total,mig.mode.current",
             "--format=csv,noheader"], capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"nvidia-smi failed: {e}"
    return (out.stdout or out.stderr).strip()


def preflight() -> dict[str, Any]:
    """Environment facts: torch, CUDA, the device (a MIG slice says so), optional packages, GDS."""
    info: dict[str, Any] = {"python": sys.version.split()[0], "cpus": len(os.sched_getaffinity(0))}
    try:
        import torch
    except ImportError as e:
        return {**info, "cuda_available": False, "error": f"torch not importable: {e}"}
    info["torch"] = torch.__version__
    info["cuda_available"] = bool(torch.cuda.is_available())
    if info["cuda_available"]:
        props = torch.cuda.get_device_properties(0)
        info.update(device=props.name, cuda=torch.version.cuda, device_count=torch.cuda.device_count(),
                    total_memory_gib=round(props.total_memory / 2**30, 1),
                    multiprocessors=props.multi_processor_count,
                    mig_slice="MIG" in props.name)
    info["nvidia_smi"] = _nvidia_smi()
    imports: dict[str, str] = {}
    for name in OPTIONAL:
        try:
            mod = importlib.import_module(name)
            imports[name] = "ok " + str(getattr(mod, "__version__", ""))
        except Exception as e:  # a broken native library raises OSError & co., not ImportError
            imports[name] = f"MISSING ({type(e).__name__}: {e}): {OPTIONAL[name]}"
    info["imports"] = imports
    try:
        sys.path.insert(0, str(ROOT / "src"))
        from feedline.io import gds_status

        info["gds"] = list(gds_status())
    except Exception as e:
        info["gds"] = [False, f"gds_status raised {type(e).__name__}: {e}"]
    return info


def run_preflight(log: Any, env: dict[str, str], scratch: Path, timeout: float = 90.0) -> dict[str, Any]:
    """:func:`preflight` in a child process with a timeout: a kvikio or CUDA import that hangs
    or crashes cannot take the runner with it. An error dict when it did not finish (the
    steps then run anyway, and fail or pass on their own)."""
    path = scratch / "preflight.json"
    step = Step("preflight", [sys.executable, str(Path(__file__).resolve()), "--preflight-json", str(path)],
                timeout)
    rc, secs = run_step(step, log, env, timeout)
    info = read_json(path)
    if rc != 0 or not isinstance(info, dict) or "unreadable" in info:
        return {"error": f"the preflight ended with rc {rc} after {secs:.0f} s (see gpu_check.log)"}
    return info


def run_step(step: Step, log: Any, env: dict[str, str], timeout: float) -> tuple[int, float]:
    """Run ``step.argv`` in its own process group; on timeout kill the whole group (rc 124)."""
    log.write(f"\n===== {step.name} (timeout {timeout:.0f} s)\n$ {' '.join(step.argv)}\n")
    log.flush()
    t0 = time.perf_counter()
    try:
        proc = subprocess.Popen(step.argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    except OSError as e:
        log.write(f"cannot start: {e}\n")
        return 127, 0.0
    _RUNNING.add(proc.pid)
    try:
        rc = proc.wait(timeout=max(1.0, timeout))
    except subprocess.TimeoutExpired:
        rc = 124
        # SIGINT first: pytest then writes its JUnit file and Python prints where it hung
        for sig, grace in ((signal.SIGINT, 10.0), (signal.SIGTERM, 5.0), (signal.SIGKILL, None)):
            _kill_group(proc.pid, sig)
            try:
                proc.wait(timeout=grace)
                break
            except subprocess.TimeoutExpired:
                continue
        log.write(f"\n!! {step.name}: stopped after {timeout:g} s\n")
    _kill_group(proc.pid, signal.SIGKILL)  # workers the step left behind hold GPU memory
    _RUNNING.discard(proc.pid)
    log.flush()
    return rc, time.perf_counter() - t0


_RUNNING: set[int] = set()  # process groups of the steps running now


def _on_stop(signum: int, frame: Any) -> None:
    """SIGTERM/SIGHUP to the runner (a timeout of whatever runs it): stop the running step's
    whole group too (its own session would outlive the runner), then exit. The summary on disk
    already holds every finished step."""
    for pgid in list(_RUNNING):
        _kill_group(pgid, signal.SIGKILL)
    raise SystemExit(128 + signum)


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def junit_counts(path: Path) -> dict[str, Any]:
    """Test counts and the failing tests (name: first line of the message) from a JUnit file."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        return {"error": f"no JUnit result: {e}"}
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    failures: dict[str, str] = {}
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "errors"}.get(child.tag, "skipped")
                if child.tag != "skipped":
                    msg = (child.get("message") or child.text or "").strip().splitlines()
                    failures[name] = msg[0][:300] if msg else child.tag
        counts[outcome] += 1
    return {**counts, "failures": failures}


_VERBOSE = re.compile(r"^(\S+::\S.*?) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b", re.M)


def verbose_counts(text: str) -> dict[str, Any]:
    """Test counts from ``pytest -v`` lines: the fallback when pytest died before its JUnit file."""
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    failures: dict[str, str] = {}
    outcome = {"PASSED": "passed", "XPASS": "passed", "FAILED": "failed", "ERROR": "errors",
               "SKIPPED": "skipped", "XFAIL": "skipped"}
    for m in _VERBOSE.finditer(text):
        counts[outcome[m.group(2)]] += 1
        if m.group(2) in ("FAILED", "ERROR"):
            failures[m.group(1)] = m.group(2)
    return {**counts, "failures": failures, "from": "the -v log (no JUnit file)"}


def read_json(path: Path) -> Any:
    """A step's JSON, or a note saying why there is none (a crash may leave it partial)."""
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        return {"unreadable": f"{type(e).__name__}: {e}"}


ROW_KEYS = ("images_per_s", "GBps", "MBps", "fed_by_gpu_decode", "samples_per_s", "items_per_s")
TOP_KEYS = ("speedup", "overhead_pct", "ratio")


def headline(result: Any) -> str:
    """A few figures of a benchmark's JSON for the table (whatever shape it has)."""
    if not isinstance(result, dict):
        return ""
    if "unreadable" in result or "error" in result:
        return str(result.get("unreadable") or result.get("error"))[:200]
    bits = []
    rows = result.get("rows")
    for row in rows[:8] if isinstance(rows, list) else []:
        if not isinstance(row, dict):
            continue
        for key in ROW_KEYS:
            value = row.get(key)
            if isinstance(value, (int, float)):
                bits.append(f"{row.get('name', '?')}: {key}={value:.3g}")
                break
        else:
            if "skipped" in row or "error" in row:
                bits.append(f"{row.get('name', '?')}: {'error' if 'error' in row else 'skipped'}")
    gpu = result.get("gpu")  # bench/checkpoint.py --device cuda
    if isinstance(gpu, dict) and isinstance(gpu.get("io"), dict):
        for io, row in gpu["io"].items():
            if isinstance(row, dict):
                value = row.get("blocked_s")
                same = " ROUND TRIP DIFFERS" if row.get("round_trip_equal") is False else ""
                bits.append(f"{io}: blocked_s={value:.3g}{same}" if isinstance(value, (int, float))
                            else f"{io}: {str(row.get('error', '?'))[:80]}")
    for key in TOP_KEYS:
        if isinstance(result.get(key), (int, float)):
            bits.append(f"{key}={result[key]:.3g}")
            break
    return "; ".join(bits)


def write_summary(out: Path, summary: dict[str, Any]) -> None:
    """Rewrite ``gpu_check.json`` atomically (a kill mid-write leaves the previous one)."""
    tmp = out / ".gpu_check.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2, default=str))
    os.replace(tmp, out / "gpu_check.json")


def table(summary: dict[str, Any]) -> str:
    """The closing table: one line per step."""
    lines = [f"{'step':<24} {'status':<10} {'secs':>6}  figures"]
    for name, s in summary["steps"].items():
        lines.append(f"{name:<24} {s.get('status', '?'):<10} {s.get('seconds', 0):>6.1f}  "
                     f"{s.get('headline', '')}"[:240])
    return "\n".join(lines)


# The GPU tests that run whole programs (diagnose subprocesses, the demo) go in a later
# step, so a slow one cannot keep the quick checks of the data path from running.
SLOW_TESTS = ("tests/gpu/observe_cuda_test.py", "tests/gpu/test_demo_gpu.py")
TESTS_TIMEOUT = {"tests": 150.0, "tests_slow": 200.0}


def _pytest(out: Path, name: str, paths: list[str], dry_run: bool, pytest_timeout: bool) -> Step:
    # -v: one PASSED/FAILED line per test in the log, read back if pytest dies before the JUnit file
    argv = [sys.executable, "-m", "pytest", *paths, "-v", "-p", "no:cacheprovider",
            f"--junitxml={out / f'gpu_{name}.xml'}", "--durations=10"]
    if dry_run:
        argv.append("--collect-only")
    else:
        # a module that cannot import (a wheel missing) must not stop every other test
        argv.append("--continue-on-collection-errors")
        if pytest_timeout:
            # signal method: a hung test fails alone (the thread method ends the whole session)
            argv += ["--timeout=90", "-o", "timeout_method=signal"]
    return Step(name, argv, TESTS_TIMEOUT[name], kind="tests")


def plan(out: Path, scratch: Path, dry_run: bool, pytest_timeout: bool) -> list[Step]:
    """Every step, in order of value; ``dry_run`` makes each one a CPU-safe check of its command."""
    quick = ["tests/gpu"] + [f"--ignore={t}" for t in SLOW_TESTS]
    steps = [_pytest(out, "tests", quick, dry_run, pytest_timeout)]
    for name, script, extra, timeout, device in GPU_BENCHES:
        if name == "diagnose_overhead":  # after the benches of issue 15 / 10 / 14
            steps.append(_pytest(out, "tests_slow", list(SLOW_TESTS), dry_run, pytest_timeout))
        argv = bench_argv(script, extra, scratch / f"{name}.json", device)
        steps.append(Step(name, argv + (["--help"] if dry_run else []), timeout))
    return steps


def load_plan(path: Path, scratch: Path) -> list[Step]:
    """Steps from a JSON plan file (see ``--plan-file``)."""
    steps = []
    for item in json.loads(path.read_text()):
        name = str(item["name"])
        subst = {"{python}": sys.executable, "{json}": str(scratch / f"{name}.json")}
        argv = [subst.get(str(a), str(a)) for a in item["argv"]]
        steps.append(Step(name, argv, float(item.get("timeout", 60)), kind=item.get("kind", "bench")))
    return steps


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "out"), help="folder for the results")
    p.add_argument("--dry-run", action="store_true",
                   help="run the plumbing on any machine: collect the GPU tests, --help each bench")
    p.add_argument("--budget", type=float, default=480.0, help="seconds for all steps together")
    p.add_argument("--wheels", default=None, help="folder of wheels to install first (no network)")
    p.add_argument("--only", default=None, help="comma-separated step names to run (default: all)")
    p.add_argument("--plan-file", default=None,
                   help="JSON list of {name, argv, timeout[, kind]} run instead of the built-in plan "
                        "(argv items '{python}' and '{json}' are replaced); for reruns and the tests")
    p.add_argument("--scratch", default=None,
                   help="folder for the steps' data and JSON (default: the repository root, on the "
                        "machine's disk; /tmp may be tmpfs, which GDS cannot read)")
    p.add_argument("--skip-preflight", action="store_true",
                   help="no environment survey and no CUDA gate (with --dry-run: tests of the plumbing)")
    p.add_argument("--preflight-json", default=None, help=argparse.SUPPRESS)  # the preflight child
    args = p.parse_args(argv)
    if args.preflight_json:
        Path(args.preflight_json).write_text(json.dumps(preflight(), indent=2, default=str))
        return 0
    if args.skip_preflight and not args.dry_run:
        p.error("--skip-preflight goes with --dry-run only")
    out = Path(args.out)
    t_start = time.perf_counter()
    scratch_base = Path(args.scratch) if args.scratch else ROOT
    scratch_base.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".gpu-check-", dir=scratch_base))
    has_timeout = importlib.util.find_spec("pytest_timeout") is not None
    steps = (load_plan(Path(args.plan_file), scratch) if args.plan_file else
             plan(out, scratch, args.dry_run, has_timeout))
    if args.only:  # a usage error comes before any work
        wanted = {n.strip() for n in args.only.split(",") if n.strip()}
        unknown = wanted - {s.name for s in steps}
        if unknown:
            shutil.rmtree(scratch, ignore_errors=True)
            p.error(f"--only: unknown steps {sorted(unknown)}; known: {[s.name for s in steps]}")
        steps = [s for s in steps if s.name in wanted]
    out.mkdir(parents=True, exist_ok=True)
    before = {sig: signal.signal(sig, _on_stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        return _run_all(args, out, scratch, steps, t_start)
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _run_all(args: argparse.Namespace, out: Path, scratch: Path, steps: list[Step], t_start: float) -> int:
    """The wheels, the preflight and every step; the summary rewritten after each."""
    summary: dict[str, Any] = {"dry_run": args.dry_run, "budget_s": args.budget, "env": {}, "steps": {}}
    log_path = out / "gpu_check.log"
    log_path.write_text("")
    for old in out.glob("gpu_tests*.xml"):
        old.unlink()  # never read a previous run's result
    with open(log_path, "a") as log:  # O_APPEND: the steps write to the same file
        site = None
        if args.wheels:
            site, summary["wheels"] = install_wheels(Path(args.wheels), log, scratch)
        env = child_env(site)
        env_info: dict[str, Any] = (
            {"skipped": True} if args.skip_preflight else run_preflight(log, env, scratch))
        summary["env"] = env_info
        write_summary(out, summary)
        print(json.dumps({k: env_info.get(k) for k in ("torch", "cuda_available", "device", "gds", "error")
                          if k in env_info}, default=str), flush=True)
        for name, state in env_info.get("imports", {}).items():
            if not state.startswith("ok"):
                print(f"  {name}: {state}", flush=True)
        if env_info.get("cuda_available") is False and not args.dry_run:
            summary["error"] = "CUDA is not available: the GPU checks did not run"
            write_summary(out, summary)
            print(summary["error"], file=sys.stderr)
            shutil.rmtree(scratch, ignore_errors=True)
            return 2
        for i, step in enumerate(steps, 1):
            left = args.budget - (time.perf_counter() - t_start)
            if left < MIN_STEP_S:
                summary["steps"][step.name] = {"status": "not run", "seconds": 0.0,
                                               "headline": "the budget was spent"}
                write_summary(out, summary)
                continue
            log.flush()
            log_start = log_path.stat().st_size
            rc, secs = run_step(step, log, env, min(step.timeout, left))
            status = "ok" if rc == 0 else ("timeout" if rc == 124 else f"rc {rc}")
            entry: dict[str, Any] = {"status": status, "rc": rc, "seconds": round(secs, 1),
                                     "argv": step.argv[1:]}
            with open(log_path, "rb") as f:
                f.seek(log_start)
                text = f.read().decode(errors="replace")
            if step.kind == "tests":
                counts = junit_counts(out / f"gpu_{step.name}.xml")
                if "error" in counts and not args.dry_run:
                    counts = {**verbose_counts(text), "junit": counts["error"]}
                entry["tests"] = counts
                collected = re.search(r"collected (\d+) items?", text)
                entry["collected"] = int(collected.group(1)) if collected else None
                entry["headline"] = (f"collected {entry['collected']}" if args.dry_run else
                                     " ".join(f"{k}={counts[k]}" for k in
                                              ("passed", "failed", "errors", "skipped") if k in counts))
            else:
                entry["result"] = read_json(scratch / f"{step.name}.json")
                entry["headline"] = (headline(entry["result"]) if entry["result"] is not None else
                                     "" if args.dry_run else "wrote no JSON")
            summary["steps"][step.name] = entry
            summary["elapsed_s"] = round(time.perf_counter() - t_start, 1)
            write_summary(out, summary)
            print(f"[{i}/{len(steps)}] {step.name}: {status} in {secs:.1f} s  {entry.get('headline', '')}",
                  flush=True)
    _cap_log(out / "gpu_check.log")
    shutil.rmtree(scratch, ignore_errors=True)
    print(table(summary), flush=True)
    bad = [n for n, s in summary["steps"].items() if s["status"] != "ok"]
    summary["failed_steps"] = bad
    write_summary(out, summary)
    return 0 if not bad else 1


def _cap_log(path: Path) -> None:
    """Keep the log under the size the device tool brings back: its head and tail."""
    size = path.stat().st_size
    if size <= LOG_CAP:
        return
    with open(path, "rb") as f:
        head = f.read(LOG_CAP // 4)
        f.seek(size - LOG_CAP // 2)
        tail = f.read()
    path.write_bytes(head + f"\n... [{size - len(head) - len(tail)} bytes cut] ...\n".encode() + tail)


if __name__ == "__main__":
    sys.exit(main())
