import json
import subprocess
import sys
from pathlib import Path

import pytest

from feedline.cli.main import main

FEEDLINE = Path(sys.executable).parent / "feedline"
SEED = ["--read", "12ms", "--decode", "8ms", "--h2d", "5ms", "--gpu", "20ms"]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(FEEDLINE), "model", *args], capture_output=True, text=True, timeout=60
    )


def test_seed_example_via_console_script():
    proc = run_cli(*SEED)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "serial       45 ms" in out
    assert "steady       20 ms" in out
    assert "GPU util     44.4% -> 100%" in out
    assert "speedup      2.25x" in out
    assert "binding      gpu" in out
    assert "workers      1 needed" in out


def test_seed_example_json_in_process(capsys):
    main(["model", *SEED, "--json", "-"])
    data = json.loads(capsys.readouterr().out)
    a = data["analytic"]
    assert a["serial"] == pytest.approx(0.045) and a["steady"] == pytest.approx(0.020)
    assert a["speedup"] == pytest.approx(2.25) and a["binding"] == "gpu"
    assert a["workers_needed"] == 1 and a["data_bound"] is False
    assert "simulation" not in data


def test_units_us_ms_s_and_data_bound_hint(capsys):
    main(["model", "--read", "0.03s", "--decode", "50000us", "--h2d", "5ms", "--gpu", "20ms", "--workers", "2"])
    out = capsys.readouterr().out
    assert "steady       40 ms" in out and "binding      decode" in out
    assert "raise --workers to 4" in out


def test_copy_bound_note(capsys):
    main(["model", "--read", "1ms", "--decode", "1ms", "--h2d", "30ms", "--gpu", "20ms"])
    out = capsys.readouterr().out
    assert "binding      h2d" in out and "more workers will not help" in out


def test_simulate_heavy_tail_prints_percentiles(capsys):
    main(["model", *SEED, "--workers", "2", "--prefetch", "1", "--read-dist", "lognormal:sigma=1.5",
          "--steps", "4000", "--json", "-"])
    sim = json.loads(capsys.readouterr().out)["simulation"]
    assert sim["steps"] == 4000 and sim["workers"] == 2 and sim["prefetch"] == 1
    assert sim["step_p50"] == pytest.approx(0.020)
    assert sim["step_p99"] > sim["step_p50"] and sim["data_stall"] > 0
    assert sim["gpu_busy"] + sim["data_stall"] == pytest.approx(1.0)
    assert sim["stages"]["read"].startswith("lognormal(median=12 ms, sigma=1.5)")


def test_simulate_text_and_plan_via_console_script():
    proc = run_cli(*SEED, "--simulate", "--steps", "2000", "--read-dist", "lognormal:sigma=0.8",
                   "--target-stall", "2%")
    assert proc.returncode == 0, proc.stderr
    for label in ("step p50", "step p95", "step p99", "GPU busy", "data stall", "plan "):
        assert label in proc.stdout
    assert "worker(s), prefetch" in proc.stdout


def test_empirical_distribution_file(tmp_path, capsys):
    times = tmp_path / "reads.json"
    times.write_text(json.dumps({"read": [10, 10, 10, 200]}))
    main(["model", *SEED, "--read-dist", f"empirical:{times},unit=ms", "--steps", "2000", "--json", "-"])
    sim = json.loads(capsys.readouterr().out)["simulation"]
    assert sim["stages"]["read"].startswith("empirical(n=4")
    assert sim["step_max"] > 0.1  # the 200 ms reads show up


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--read", "12parsecs", *SEED[2:]], "--read"),
        ([*SEED, "--workers", "0"], "--workers"),
        ([*SEED, "--steps", "0", "--simulate"], "--steps"),
        ([*SEED, "--read-dist", "gamma"], "unknown distribution"),
        ([*SEED, "--read-dist", "lognormal"], "needs sigma"),
        ([*SEED, "--target-stall", "150%"], "--target-stall"),
        ([*SEED, "--read-dist", "empirical:/nonexistent/x.json"], "cannot read"),
        (["--read", "12ms"], "missing --decode, --h2d, --gpu"),
        ([*SEED[:6], "--gpu", "-5ms"], "--gpu"),
    ],
)
def test_bad_arguments_one_line_exit_2(args, needle, capsys):
    with pytest.raises(SystemExit) as info:
        main(["model", *args])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err


def test_bad_argument_via_console_script_has_no_traceback():
    proc = run_cli(*SEED, "--read-dist", "weibull")
    assert proc.returncode == 2
    assert proc.stderr.startswith("feedline: error:") and proc.stderr.count("\n") == 1
    assert proc.stdout == ""


@pytest.mark.parametrize("arg", [["--steps", "99999999999999999999"], ["--workers", "1000000000"],
                                 ["--device-buffers", "10000000"]])
def test_a_simulation_too_large_to_hold_is_an_argument_error(arg):
    # before: "ValueError: Maximum allowed dimension exceeded" (a traceback), or numpy
    # trying to allocate 74.5 GiB for --steps 10000000000
    proc = subprocess.run([sys.executable, "-m", "feedline", "model", *SEED, "--simulate", *arg],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{arg[0]} must be at most 5,000,000" in proc.stderr
