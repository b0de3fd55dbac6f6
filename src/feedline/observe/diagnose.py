"""Run a training command unchanged under measurement (``feedline diagnose``).

:func:`run_diagnose` starts the command as a child process whose start-up
(a generated ``sitecustomize.py`` first on ``PYTHONPATH``) installs the
measuring hooks (see :mod:`feedline.observe._child`). The child writes its
report as JSON into a private temporary directory; the parent reads it back
as a :class:`~feedline.observe.report.Report`. The child's exit status is
returned unchanged.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import feedline
from feedline.errors import ConfigError
from feedline.observe._child import CONFIG_ENV, PID_ENV
from feedline.observe.report import Report

SITECUSTOMIZE = f'''"""Written by feedline diagnose: measure this process only."""
import os

if os.environ.get("{CONFIG_ENV}") and os.environ.get("{PID_ENV}") in (None, str(os.getpid())):
    from feedline.observe._child import bootstrap

    bootstrap()
'''


def run_diagnose(command: Sequence[str], *, steps: int | None = None, ab: bool | None = None,
                 replay: int = 10, device: str = "auto", name: str | None = None,
                 timeout: float | None = None) -> tuple[int, Report | None]:
    """Run ``command`` (e.g. ``["python", "train.py", "--lr", "0.1"]``) and measure it.

    Args:
        command: the training command; its Python must be able to import
            torch (feedline's own directory is added to ``PYTHONPATH``).
        steps: end the run (``SystemExit(0)`` in the child) after this many steps.
        ab: synthetic-batch check: True always, False never, None when unclear.
        replay: steps of the synthetic-batch check.
        device: ``"auto"`` (CUDA if available), ``"cpu"`` or ``"cuda:N"``.
        name: the run's label (default: the script name).
        timeout: seconds before the child is killed (``subprocess.TimeoutExpired``).

    Returns:
        The child's exit status and its report (None when it wrote none,
        e.g. it crashed at start-up or was killed).

    Raises:
        ConfigError: empty command, a bad option, or a command that cannot start.
    """
    cmd = list(command)
    if not cmd:
        raise ConfigError("no training command given", fix="feedline diagnose -- python train.py")
    if steps is not None and steps < 1:
        raise ConfigError(f"--steps must be >= 1, got {steps}", field="steps")
    if replay < 2:
        raise ConfigError(f"--replay must be >= 2, got {replay}", field="replay")
    label = name or next((Path(a).stem for a in cmd[1:] if a.endswith(".py")), Path(cmd[0]).name)
    tmp = Path(tempfile.mkdtemp(prefix="feedline-diagnose-"))
    try:
        (tmp / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
        result = tmp / "result.json"
        cfg = {"steps": steps, "ab": ab, "replay": replay, "device": device, "name": label,
               "result": str(result)}
        (tmp / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
        env = dict(os.environ)
        env.pop(PID_ENV, None)
        root = str(Path(feedline.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tmp), root, env.get("PYTHONPATH")) if p)
        env[CONFIG_ENV] = str(tmp / "config.json")
        try:
            proc = subprocess.run(cmd, env=env, timeout=timeout, check=False)
        except (FileNotFoundError, PermissionError) as e:
            raise ConfigError(f"cannot start {cmd[0]!r}: {e.strerror}",
                              fix="give the full command after --, e.g. -- python train.py") from e
        report = None
        if result.exists():
            report = Report.from_dict(json.loads(result.read_text(encoding="utf-8")))
        return proc.returncode, report
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
