"""The shared CLI front: bad arguments are one line on stderr and exit 2."""

import subprocess
import sys

import pytest

from cli_inproc import run_cli

BAD = [
    ["model", "--workers", "x", "--read", "1ms", "--decode", "1ms", "--h2d", "1ms", "--gpu", "1ms"],
    ["doctor", "--bogus"],
    ["no-such-command"],
    ["model", "--read", "12parsecs", "--decode", "1ms", "--h2d", "1ms", "--gpu", "1ms"],
]


def _bad_arguments_one_line_exit_2(out):
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("feedline: error:"), out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("argv", BAD, ids=lambda a: " ".join(a[:2]))
def test_bad_arguments_one_line_exit_2(argv):
    _bad_arguments_one_line_exit_2(run_cli(*argv))


def test_bad_arguments_one_line_exit_2_from_a_real_process():
    """The same front as the in-process cases above, through ``python -m feedline``."""
    _bad_arguments_one_line_exit_2(subprocess.run(
        [sys.executable, "-m", "feedline", *BAD[2]], capture_output=True, text=True, timeout=60))


def _cli(*argv: str, cwd: str | None = None, env: dict[str, str] | None = None):
    """Run ``python -m feedline`` from this tree's sources, from any folder."""
    import os
    from pathlib import Path

    import feedline

    src = str(Path(feedline.__file__).resolve().parents[1])
    path = os.pathsep.join([src, *filter(None, [os.environ.get("PYTHONPATH")])])
    return subprocess.run([sys.executable, "-m", "feedline", *argv], capture_output=True,
                          text=True, timeout=120, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": path, **(env or {})})


def test_version():
    import feedline

    out = _cli("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"feedline {feedline.__version__}"


COMMANDS = ("demo", "pack", "index", "inspect", "verify", "model", "doctor", "diagnose")


@pytest.fixture(scope="module")
def helps() -> dict:
    """``python -m feedline [CMD] --help`` of the front and of each command, run once for the
    module's help tests and side by side (each is a fresh interpreter importing typer)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=3) as pool:
        futs = {cmd: pool.submit(_cli, *([cmd] if cmd else []), "--help") for cmd in ("", *COMMANDS)}
        return {cmd: f.result() for cmd, f in futs.items()}


def test_help_lists_every_command(helps):
    out = helps[""]
    assert out.returncode == 0
    for cmd in COMMANDS:
        assert cmd in out.stdout


@pytest.mark.parametrize("cmd", ["", *COMMANDS])
def test_help_shows_no_bool_type_and_no_test_options(helps, cmd):
    out = helps[cmd]
    assert out.returncode == 0, out.stderr
    assert "<bool>" not in out.stdout and "--help" in out.stdout
    assert "--sysfs" not in out.stdout and "for testing" not in out.stdout


@pytest.mark.parametrize("cmd", COMMANDS)
def test_every_command_takes_json_path(helps, cmd):
    """One convention: --json PATH (or -), never a bare flag."""
    out = helps[cmd]
    line = next(ln for ln in out.stdout.splitlines() if "--json" in ln)
    assert "PATH" in line, line


def test_model_duration_without_unit_is_an_argument_error():
    out = run_cli("model", "--read", "12", "--decode", "8ms", "--h2d", "5ms", "--gpu", "20ms")
    assert out.returncode == 2
    assert "--read" in out.stderr and "no unit" in out.stderr and "12ms" in out.stderr


@pytest.mark.parametrize("cmd", [
    ["model", "--read", "12ms", "--decode", "8ms", "--h2d", "5ms", "--gpu", "20ms"],
    ["doctor", "--workers", "1"],
])
def test_json_takes_a_path_or_dash(cmd, tmp_path):
    import json

    dest = tmp_path / "out.json"
    to_file, to_stdout, missing = (run_cli(*cmd, "--json", str(dest)), run_cli(*cmd, "--json", "-"),
                                   run_cli(*cmd, "--json", str(tmp_path / "no" / "out.json")))
    assert to_file.returncode in (0, 1), to_file.stderr  # doctor exits 1 when a check fails
    assert to_file.stdout.strip(), "text output still printed when JSON goes to a file"
    data = json.loads(dest.read_text())
    assert json.loads(to_stdout.stdout).keys() == data.keys()
    assert missing.returncode == 2 and "does not exist" in missing.stderr


def test_demo_argument_errors_come_before_any_output(tmp_path):
    argvs = (["--json", str(tmp_path / "no" / "x.json")], ["--html", str(tmp_path)],
             ["--device", "tpu"], ["--frames", "4", "--batch-size", "8"])
    outs = [run_cli("demo", "--out", str(tmp_path / "work"), *argv) for argv in argvs]
    for argv, out in zip(argvs, outs, strict=True):
        assert out.returncode == 2, (argv, out.stderr)
        assert out.stdout == "" and len(out.stderr.strip().splitlines()) == 1, argv
        assert not (tmp_path / "work").exists()


def test_os_errors_are_one_line_naming_the_path_exit_1(tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    cases = [
        (["demo", "--out", "file/sub", "--frames", "8", "--batch-size", "4"], "file/sub", "folder"),
        (["demo", "--out", "loop/sub", "--frames", "8", "--batch-size", "4"], "loop/sub", "link"),
        (["model", "--read", "1ms", "--decode", "1ms", "--h2d", "1ms", "--gpu", "1ms",
          "--json", "/dev/full"], "/dev/full", "space"),
    ]
    outs = [run_cli(*argv, cwd=str(tmp_path)) for argv, _, _ in cases]
    for (argv, path, hint), out in zip(cases, outs, strict=True):
        assert out.returncode == 1, (argv, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and path in lines[0] and hint in lines[0], out.stderr
        assert "Traceback" not in out.stderr
    # FEEDLINE_DEBUG=1 lets the error through (a real process prints its traceback)
    with pytest.raises(OSError):
        run_cli(*cases[0][0], cwd=str(tmp_path), env={"FEEDLINE_DEBUG": "1"})


@pytest.mark.parametrize("code", ["EACCES", "EROFS", "ENOSPC", "ENOTDIR", "ELOOP", "EDQUOT"])
def test_os_error_line_names_path_and_fix(code):
    import errno
    import os

    from feedline.cli.main import os_error_line

    number = getattr(errno, code)
    line = os_error_line(OSError(number, os.strerror(number), "/data/x"))
    assert line.startswith(os.strerror(number)) and "/data/x" in line and "Fix:" in line


@pytest.mark.timeout(60)
def test_every_command_help_ends_with_examples_that_parse(capsys):
    """Each command's help ends with examples, and each example's options exist: its line
    with --help put after the command name parses (an unknown option fails before help)."""
    import shlex

    from feedline.cli._examples import EXAMPLES
    from feedline.cli.main import main

    assert set(EXAMPLES) == {"demo", "pack", "index", "inspect", "verify", "model", "doctor", "diagnose"}
    for cmd, examples in EXAMPLES.items():
        assert _status(main, [cmd, "--help"]) == 0
        help_text = " ".join(capsys.readouterr().out.split())
        assert "Examples:" in help_text and " ".join(examples[0].split()) in help_text, cmd
        for line in examples:
            argv = shlex.split(line, comments=True)
            argv = argv[:argv.index(">")] if ">" in argv else argv
            assert argv[:2] == ["feedline", cmd], line
            assert _status(main, [cmd, "--help", *argv[2:]]) == 0, (line, capsys.readouterr().err)
        capsys.readouterr()


def _status(main, argv):
    """``main(argv)``'s exit status: 0 when it returns (help, in click's non-standalone mode)."""
    try:
        main(argv)
    except SystemExit as e:
        return e.code
    return 0
