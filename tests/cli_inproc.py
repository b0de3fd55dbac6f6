"""``feedline ARGV`` run in the test's own interpreter: what the front (``feedline.cli.main.main``)
prints and the status it exits with, without a fresh interpreter importing typer, rich and
feedline for each case (0.4-0.6 s of CPU each, most of a bad-argument test).

For tests of what the front says and the status it gives (argument errors, OS errors turned
into one line, ``--json PATH`` or ``-``). What only a real process shows (the ``python -m
feedline`` entry, an uncaught exception's traceback, permissions a child drops, signals)
stays with ``subprocess`` runs; each file using this keeps at least one of those.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
from collections.abc import Iterator

from feedline.cli.main import main


@contextlib.contextmanager
def _environ(env: dict[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.pop("FEEDLINE_DEBUG", None)  # tracebacks only when the test asks for them
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def run_cli(*argv: str, cwd: str | None = None, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    """``main(argv)`` with stdout and stderr captured, in ``cwd`` and with ``env`` added to the
    environment (both restored after): a ``CompletedProcess`` as ``subprocess.run`` would give
    for ``python -m feedline ARGV``. An exception ``main`` lets through propagates (a real
    process would print its traceback and exit 1)."""
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    code = 0
    with _environ({"COLUMNS": "200", **(env or {})}), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        if cwd is not None:
            os.chdir(cwd)
        try:
            main(list(argv))
        except SystemExit as e:
            if isinstance(e.code, int) or e.code is None:
                code = e.code or 0
            else:  # SystemExit("message"): Python prints it and exits 1
                print(e.code, file=err)
                code = 1
        finally:
            os.chdir(here)
    return subprocess.CompletedProcess(["feedline", *argv], code, out.getvalue(), err.getvalue())
