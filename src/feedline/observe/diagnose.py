"""Run a training command unchanged under measurement (``feedline diagnose``).

:func:`run_diagnose` starts the command as a child process whose start-up
(a generated ``sitecustomize.py`` first on ``PYTHONPATH``) installs the
measuring hooks (see :mod:`feedline.observe._child`). The child writes its
report as JSON into a private temporary directory; the parent reads it back
as a :class:`~feedline.observe.report.Report` (or, when the child was killed
before it could, the last partial report it wrote). When the command's own
process trains nothing but processes it starts do (``torch.multiprocessing.spawn``
ranks, torchrun workers, a launcher script, a forked ``multiprocessing.Process``),
the report is one of theirs, rank 0 first (:mod:`feedline.observe._descendant`),
or the rank waiting for data when rank 0 is not (ranks of one job step together,
so the others wait for it inside their steps), with a note naming it and the
others' verdicts. The child's exit status is
returned as a shell reports it (128 + N for a child killed by signal N).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import feedline
from feedline.errors import ConfigError
from feedline.observe._child import CONFIG_ENV, PID_ENV, PROC_PREFIX
from feedline.observe.report import Report

DESCENDANT = str(Path(__file__).with_name("_descendant.py"))
"""Loaded by path in the processes the command starts (see :mod:`._descendant`)."""
HOOK_ERROR = "hook_error.txt"
"""Written next to the config by a child whose Python cannot import the hook."""

CLAIM = "claimed"
"""Made (``O_EXCL``) by the first Python process of the command: the command's own process.
A shell command (``bash train.sh``) starts its Python programs side by side, none of them
the parent of the others, so none sees another's ``FEEDLINE_DIAGNOSE_PID``: the later ones
(``python export.py`` after ``python train.py``) are measured as processes the command
started, not as the command's own process, whose report they would overwrite."""

SITECUSTOMIZE = f'''"""Written by feedline diagnose: measure the command's process, and any
process it starts that iterates a loader."""
import os


def _feedline_claim():
    """The first Python process of the command claims it (a shell's later ones do not)."""
    try:
        os.close(os.open(os.path.join(os.path.dirname(os.environ["{CONFIG_ENV}"]), "{CLAIM}"),
                         os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return False
    except OSError:
        pass
    return True


if os.environ.get("{CONFIG_ENV}") and (os.environ.get("{PID_ENV}") == str(os.getpid()) or (
        os.environ.get("{PID_ENV}") is None and _feedline_claim())):
    try:
        from feedline.observe._child import bootstrap
    except ImportError as e:  # another Python than feedline's: the parent says so
        import sys

        with open(os.path.join(os.path.dirname(os.environ["{CONFIG_ENV}"]), "{HOOK_ERROR}"), "w") as f:
            f.write(f"{{sys.executable}}: {{type(e).__name__}}: {{e}}")
    else:
        bootstrap()
elif os.environ.get("{CONFIG_ENV}"):
    try:  # by file path: importing the feedline.observe package here would slow every subprocess
        import importlib.util

        _spec = importlib.util.spec_from_file_location("_feedline_descendant", {DESCENDANT!r})
        _mod = importlib.util.module_from_spec(_spec)
        _spec.loader.exec_module(_mod)
        _mod.arm()
    except Exception:  # another Python than feedline's: this process goes unmeasured
        pass
'''

_PYTHON = re.compile(r"python[0-9.]*")


def _hook_fix() -> str:
    return (f"run the command with the Python feedline is installed in: -- {sys.executable} "
            "train.py ... (or activate its environment first)")


def _check_interpreter(cmd: list[str], env: dict[str, str]) -> None:
    """Before the run: a bare ``python`` that is another interpreter than feedline's must
    still import the measuring hook, or the whole run would go unmeasured.

    Raises:
        ConfigError: that interpreter cannot import it (naming it and why).
    """
    exe = shutil.which(cmd[0], path=env.get("PATH"))
    if exe is None or not _PYTHON.fullmatch(Path(cmd[0]).name) or exe == sys.executable:
        return
    probe_env = {k: v for k, v in env.items() if k != CONFIG_ENV}
    try:
        probe = subprocess.run([exe, "-c", "import feedline.observe._child"], env=probe_env,
                               capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return  # the run itself will say what is wrong
    if probe.returncode != 0:
        lines = probe.stderr.strip().splitlines()
        why = lines[-1] if lines else f"exit status {probe.returncode}"
        raise ConfigError(f"{cmd[0]!r} here is {exe}, which cannot load feedline's measuring hook "
                          f"({why})", fix=_hook_fix())


def _hook_error(tmp: Path) -> ConfigError | None:
    """After the run: the child's Python could not import the hook (a wrapper script that
    starts another interpreter), so nothing was measured."""
    path = tmp / HOOK_ERROR
    if not path.exists():
        return None
    return ConfigError("the command ran unmeasured: its Python could not load feedline's "
                       f"measuring hook ({path.read_text(encoding='utf-8').strip()})", fix=_hook_fix())


def exit_status(returncode: int) -> int:
    """A child's status as a shell reports it: 128 + N for a child killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def _die_with_parent() -> None:
    """In the child before exec (Linux): SIGTERM when diagnose itself dies, so no orphan."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: forwarding still covers SIGTERM / SIGINT sent to diagnose


def _terminal_sent_to_group(signum: int, proc: subprocess.Popen[bytes]) -> bool:
    """Ctrl-C at a terminal reaches the whole foreground group: the child too, unless it
    moved to a process group of its own (``setsid``, ``setpgrp``); then it must be sent."""
    if signum != signal.SIGINT:
        return False
    try:
        ours = os.getpgrp()
        return os.tcgetpgrp(sys.stdin.fileno()) == ours and os.getpgid(proc.pid) == ours
    except (OSError, ValueError, AttributeError):
        return False


@contextmanager
def _forwarding(proc: subprocess.Popen[bytes]) -> Iterator[None]:
    """Pass SIGTERM / SIGINT sent to this process on to ``proc`` while it runs.

    A second one ends ``proc`` with SIGKILL: a training command that ignores or
    outlasts SIGTERM (a handler that never exits) would otherwise keep ``diagnose``
    waiting until it is killed itself, which leaves the command running as an orphan.
    """
    received: list[int] = []

    def forward(signum: int, frame: Any) -> None:
        if proc.poll() is not None:
            return
        received.append(signum)
        if len(received) > 1:
            print(f"feedline diagnose: {signal.Signals(signum).name} again: killing the training "
                  f"command (pid {proc.pid}) with SIGKILL", file=sys.stderr)
            proc.kill()
        elif not _terminal_sent_to_group(signum, proc):
            proc.send_signal(signum)

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _read_one(result: Path, partial: Path) -> Report | None:
    """One process's final report, else the report of its last partial result (built
    here from its raw measurements, :mod:`feedline.observe._snapshot`), else None."""
    if result.exists():
        return Report.from_dict(json.loads(result.read_text(encoding="utf-8")))
    if not partial.exists():
        return None
    from feedline.observe._snapshot import restore

    data = json.loads(partial.read_text(encoding="utf-8"))
    session = restore(data["snapshot"])
    try:
        report = session.partial_report()
    finally:
        if session._worker_dir is not None:  # the killed child could not remove it
            shutil.rmtree(session._worker_dir, ignore_errors=True)
    report.host = report.host | {"partial": True}
    if data.get("process"):
        report.host["process"] = dict(data["process"])
    return report


def _descendants(tmp: Path) -> list[Report]:
    """Reports of the processes the command started that iterated a loader."""
    pids = sorted({int(m.group(1)) for p in tmp.glob(f"{PROC_PREFIX}*.json")
                   if (m := re.fullmatch(rf"{PROC_PREFIX}(\d+)(?:\.partial)?\.json", p.name))})
    reps = [_read_one(tmp / f"{PROC_PREFIX}{pid}.json", tmp / f"{PROC_PREFIX}{pid}.partial.json")
            for pid in pids]
    return [r for r in reps if r is not None and r.steps > 0]


def _who(rep: Report) -> str:
    proc = rep.host.get("process") or {}
    rank = proc.get("rank")
    return f"process {proc.get('pid')}" + (f" (rank {rank})" if rank is not None else "")


def _slowest_rank(pick: Report, kids: list[Report]) -> Report | None:
    """The rank whose data path paces the job, when it is not ``pick``: ranks of one
    job (each with a rank) meet in collectives every step (or every few, with
    ``no_sync()`` accumulation), so a rank that waits for data makes the others wait
    inside their steps (an all-reduce), where their own reports see compute. The most
    data-stalled data-bound rank, if ``pick`` is not data-bound, or if it stalls more than
    ``pick`` and ``pick``'s steps wait for it (:func:`_collective_wait`, a quarter of
    ``pick``'s step or more: a rank 0 data-bound a little, on its own start-up, while its
    peer waits for reads most of each step, is not the pace; ranks whose data cost the
    same, with steps alike, keep ``pick``); else None."""
    ranks = [k for k in kids if k.host["process"].get("rank") is not None]
    if pick not in ranks or len(ranks) < 2:
        return None
    bound = [k for k in ranks if k.verdict == "data-bound"]
    slowest = max(bound, key=lambda r: r.stall_fraction) if bound else None
    if slowest is None or slowest is pick:
        return None
    if pick.verdict != "data-bound":
        return slowest
    step = pick.stages.get("step")
    held = _collective_wait(pick, slowest)
    if (slowest.stall_fraction > pick.stall_fraction and step is not None
            and held >= 0.25 * step.mean > 0):
        return slowest
    return None


def _collective_wait(rep: Report, pace: Report) -> float:
    """Seconds a step of rank ``rep`` spends waiting for rank ``pace`` inside the step
    (in collectives), from the two ranks' step bodies: the ranks run the same model on
    batches of the same size, so the mean step body of ``rep`` beyond that of ``pace``
    is time the collective held it (0 when not longer). Means, not medians: with
    ``no_sync()`` accumulation only every few steps meet in an all-reduce."""
    mine, theirs = (r.stages.get("step") for r in (rep, pace))
    if mine is None or theirs is None:
        return 0.0
    return max(0.0, mine.mean - theirs.mean)


def _other_rank(rep: Report, pace: Report | None) -> str:
    """One line on a rank not reported: its own verdict, and when the reported rank
    paces the job, the share of its step spent waiting for that rank in collectives."""
    out = f"{_who(rep)} {rep.verdict} ({rep.stall_fraction:.0%} stall, binding {rep.binding}"
    if pace is None:
        return out + ")"
    wait = _collective_wait(rep, pace)
    step = rep.stages.get("step")
    body = step.mean if step is not None else 0.0
    if wait > 0 and body > 0 and wait >= 0.25 * body:
        out += (f"; {wait * 1e3:.0f} ms of its {body * 1e3:.0f} ms mean step is waiting for "
                f"{_who(pace)} in collectives, not compute")
    return out + ")"


def _read_report(tmp: Path, result: Path, partial: Path) -> Report | None:
    """The command's own report, or, when its own process measured no training step and
    processes it started did (ranks of ``torch.multiprocessing.spawn``, torchrun workers,
    a launcher's ``python train.py``), the report of one of those: rank 0 if known, else
    the one with the most steps, else the first started; but when rank 0 is not
    data-bound and another rank is, that rank (:func:`_slowest_rank`). Notes say which,
    and of how many."""
    main = _read_one(result, partial)
    kids = _descendants(tmp)
    if not kids:
        return main
    if main is not None and main.steps > 0:
        main.host = main.host | {"notes": [*main.host.get("notes", []), (
            f"{len(kids)} process(es) the command started also iterated loaders "
            f"({', '.join(_who(k) for k in kids)}); this report is the command's own process")]}
        return main
    pick = min(kids, key=lambda r: (r.host["process"].get("rank") not in (0, None),
                                    r.host["process"].get("rank") is None, -r.steps))
    slowest = _slowest_rank(pick, kids)
    paced = slowest is not None
    pick = slowest or pick
    rest = [k for k in kids if k is not pick]
    note = (f"the command's own process iterated no loader: this report measured {_who(pick)}, "
            f"one of {len(kids)} process(es) it started that trained")
    if paced:
        note += (", because it is the one waiting for data: ranks of one job step together "
                 "(collectives), so the others wait for it inside their steps and the job "
                 "runs at its pace")
    if rest:
        note += "; the others: " + ", ".join(_other_rank(k, pick if paced else None)
                                             for k in rest)
    pick.host = pick.host | {"notes": [*pick.host.get("notes", []), note]}
    if main is not None and main.loaders:
        pick.loaders = [*main.loaders, *pick.loaders]
    return pick


def run_diagnose(command: Sequence[str], *, steps: int | None = None, ab: bool = False,
                 replay: int = 10, device: str = "auto", name: str | None = None,
                 timeout: float | None = None, partial_every: float = 5.0,
                 stdout: int | None = None) -> tuple[int, Report | None]:
    """Run ``command`` (e.g. ``["python", "train.py", "--lr", "0.1"]``) and measure it.

    The run is the user's run: the same batches, epochs and steps as without
    diagnose, except that ``steps`` ends it early. SIGTERM and SIGINT sent to
    this process are passed on to the command (Ctrl-C at a terminal already
    reaches it), and on Linux the command gets SIGTERM if this process dies.

    Args:
        command: the training command; its Python must be able to import
            torch (feedline's own directory is added to ``PYTHONPATH``).
        steps: end the run after this many steps of a loader.
        ab: the synthetic-batch check after the ``steps`` measured steps (needs ``steps``).
        replay: steps of the synthetic-batch check.
        device: ``"auto"`` (CUDA if available), ``"cpu"`` or ``"cuda:N"``.
        name: the run's label (default: the script name).
        timeout: seconds before the child is killed (``subprocess.TimeoutExpired``).
        partial_every: seconds between partial reports (at least; 0: none), kept in
            case the command is killed before it can write its final report.
        stdout: where the command's stdout goes (a file descriptor, e.g. 2 when this
            process's stdout carries the JSON report); ``None``: this process's stdout.

    Returns:
        The command's exit status as a shell reports it (128 + N when killed by
        signal N) and its report: the final one, else the last partial one, else None
        (of the command's own process, or of a process it started that trained when
        its own did not).

    Raises:
        ConfigError: empty command, a bad option (``ab`` without ``steps``), a
            command that cannot start, or a Python that cannot import feedline's hook
            (checked before the run for a bare ``python`` that is not feedline's).
    """
    cmd = list(command)
    if not cmd:
        raise ConfigError("no training command given", fix="feedline diagnose -- python train.py")
    if steps is not None and steps < 1:
        raise ConfigError(f"--steps must be >= 1, got {steps}", field="steps")
    if replay < 2:
        raise ConfigError(f"--replay must be >= 2, got {replay}", field="replay")
    if not isinstance(device, str) or not re.fullmatch(r"auto|cpu|cuda(:\d+)?", device):
        raise ConfigError(f"--device must be auto, cpu, cuda or cuda:N, got {device!r}", field="device",
                          fix="e.g. --device cuda:0")  # before: any text ran, timed as CPU
    if not isinstance(partial_every, (int, float)) or not 0 <= partial_every < float("inf"):
        raise ConfigError(f"--partial-every must be a number of seconds >= 0 (0: none), got {partial_every!r}",
                          field="partial_every")
    if ab and steps is None:
        raise ConfigError(
            "--ab needs --steps N: the synthetic-batch check replays the last batch after the "
            "N measured steps, where diagnose ends the run, so a full run is never changed",
            field="ab", fix="feedline diagnose --steps 50 --ab -- python train.py")
    label = name or next((Path(a).stem for a in cmd[1:] if a.endswith(".py")), Path(cmd[0]).name)
    tmp = Path(tempfile.mkdtemp(prefix="feedline-diagnose-"))
    try:
        (tmp / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
        result, partial = tmp / "result.json", tmp / "partial.json"
        cfg = {"steps": steps, "ab": ab, "replay": replay, "device": device, "name": label,
               "result": str(result), "partial": str(partial), "partial_every": partial_every}
        (tmp / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
        env = dict(os.environ)
        env.pop(PID_ENV, None)
        root = str(Path(feedline.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tmp), root, env.get("PYTHONPATH")) if p)
        env[CONFIG_ENV] = str(tmp / "config.json")
        _check_interpreter(cmd, env)
        try:
            proc = subprocess.Popen(cmd, env=env, stdout=stdout, preexec_fn=_die_with_parent)
        except (FileNotFoundError, PermissionError) as e:
            raise ConfigError(f"cannot start {cmd[0]!r}: {e.strerror}",
                              fix="give the full command after --, e.g. -- python train.py") from e
        with _forwarding(proc):
            try:
                code = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise
        report = _read_report(tmp, result, partial)
        if report is None and (err := _hook_error(tmp)) is not None:
            raise err
        return exit_status(code), report
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
