"""The one GPU check: every GPU test and GPU benchmark in one go.

Run it on a CUDA machine from the repository root::

    PYTHONPATH=src python3 bench/gpu_check.py --out "$OUT"

It writes ``gpu_check.json`` (the summary: environment, test outcome, each
benchmark's JSON), ``gpu_tests.xml`` (JUnit) and ``gpu_check.log`` under
``--out``. Without CUDA it does not skip anything: it writes the summary with
``"cuda_available": false`` and exits 2, so a missing GPU is never mistaken
for a pass. ``--dry-run`` prints the plan and runs nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (name, script, extra arguments). Each script accepts --device and --json (a later
# --device in the extra arguments wins).
GPU_BENCHES: list[tuple[str, str, list[str]]] = [
    ("loader_h2d", "bench/loader_h2d.py", []),
    ("read_gds", "bench/read_gds.py", []),
    ("diagnose_overhead", "bench/diagnose_overhead.py", []),
    ("gpu_decode", "bench/gpu_decode.py", []),
    ("checkpoint", "bench/checkpoint.py", []),
    ("demo", "-m", ["feedline", "demo", "--device", "cuda"]),
    # not a GPU bench: the JPEG loader goals (1.5x vs DataLoader / WebDataset) on a host
    # with many cores, since 2 cores cap them (see the ceiling line it prints)
    ("loader_jpeg_many_cores", "bench/loader_jpeg.py", ["--device", "cpu", "--repeat", "3"]),
]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["FEEDLINE_GPU"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    src = str(ROOT / "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _cuda_info() -> dict[str, object]:
    try:
        import torch
    except ImportError as e:
        return {"cuda_available": False, "error": f"torch not importable: {e}"}
    info: dict[str, object] = {"torch": torch.__version__, "cuda_available": torch.cuda.is_available()}
    if torch.cuda.is_available():
        info["device"] = torch.cuda.get_device_name(0)
        info["cuda"] = torch.version.cuda
    return info


def _run(cmd: list[str], log, timeout: float) -> tuple[int, float]:
    log.write(f"\n$ {' '.join(cmd)}\n")
    log.flush()
    t0 = time.perf_counter()
    try:
        rc = subprocess.run(
            cmd, cwd=ROOT, env=_env(), stdout=log, stderr=subprocess.STDOUT, timeout=timeout
        ).returncode
    except subprocess.TimeoutExpired:
        rc = 124
    return rc, time.perf_counter() - t0


def _bench_cmd(script: str, extra: list[str], json_path: Path) -> list[str]:
    if script == "-m":
        return [sys.executable, "-m", *extra, "--json", str(json_path)]
    return [sys.executable, script, "--device", "cuda", *extra, "--json", str(json_path)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "out"), help="folder for results")
    p.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    p.add_argument("--test-timeout", type=float, default=300.0)
    p.add_argument("--bench-timeout", type=float, default=180.0)
    args = p.parse_args(argv)
    out = Path(args.out)
    plan = [("tests", "pytest tests/gpu")] + [(n, s) for n, s, _ in GPU_BENCHES]
    if args.dry_run:
        for name, what in plan:
            print(f"{name}: {what}")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, object] = {"env": _cuda_info(), "tests": None, "benches": {}}
    if not summary["env"].get("cuda_available"):  # type: ignore[union-attr]
        summary["error"] = "CUDA is not available: the GPU checks did not run"
        (out / "gpu_check.json").write_text(json.dumps(summary, indent=2))
        print(summary["error"], file=sys.stderr)
        return 2
    with open(out / "gpu_check.log", "w") as log:
        rc, secs = _run(
            [sys.executable, "-m", "pytest", "tests/gpu", "-q", "-p", "no:cacheprovider",
             f"--junitxml={out / 'gpu_tests.xml'}"],
            log, args.test_timeout,
        )
        summary["tests"] = {"rc": rc, "seconds": round(secs, 1)}
        benches: dict[str, object] = {}
        for name, script, extra in GPU_BENCHES:
            if script != "-m" and not (ROOT / script).exists():
                benches[name] = {"rc": None, "error": f"{script} missing"}
                continue
            jpath = out / f"{name}.json"
            rc, secs = _run(_bench_cmd(script, extra, jpath), log, args.bench_timeout)
            result = json.loads(jpath.read_text()) if jpath.exists() else None
            benches[name] = {"rc": rc, "seconds": round(secs, 1), "result": result}
        summary["benches"] = benches
    (out / "gpu_check.json").write_text(json.dumps(summary, indent=2, default=str))
    failed = [n for n, b in benches.items() if b.get("rc") != 0]  # type: ignore[union-attr]
    print(json.dumps({"tests_rc": summary["tests"]["rc"], "bench_failed": failed}))  # type: ignore[index]
    return 0 if summary["tests"]["rc"] == 0 and not failed else 1  # type: ignore[index]


if __name__ == "__main__":
    sys.exit(main())
