"""One ``--json`` convention for every command.

``--json PATH`` writes the command's result as JSON to ``PATH``; ``--json -``
prints it to stdout instead of the text output. The destination is checked
before any work starts (:func:`check_json_dest`), so a missing folder is an
argument error, not a traceback after a long run.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import typer

JSON_HELP = "write the result as JSON to PATH ('-' prints it to stdout instead of text)"


def json_option(help: str = JSON_HELP) -> Any:
    """The typer option every command uses for ``--json``."""
    return typer.Option("--json", metavar="PATH", help=help)


def to_stdout(dest: str | Path | None) -> bool:
    """True when ``--json -`` asked for JSON on stdout (and no text output)."""
    return dest is not None and str(dest) == "-"


def check_json_dest(dest: str | Path | None) -> None:
    """Raise a usage error now if ``dest`` cannot be written later."""
    if dest is None or to_stdout(dest):
        return
    path = Path(dest)
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise typer.BadParameter(f"{path} is a folder; give a file name", param_hint="--json")
    if not parent.is_dir():
        raise typer.BadParameter(f"folder {parent} does not exist", param_hint="--json")
    if not os.access(parent, os.W_OK):
        raise typer.BadParameter(f"folder {parent} is not writable", param_hint="--json")


def write_json(obj: Any, dest: str | Path | None) -> None:
    """Write ``obj`` to ``dest`` (``-``: stdout; ``None``: nothing)."""
    if dest is None:
        return
    text = json.dumps(obj, indent=1, default=str)
    if to_stdout(dest):
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
        return
    try:
        Path(dest).write_text(text + "\n", encoding="utf-8")
    except OSError as e:
        if e.filename is not None:
            raise
        # a failed write (ENOSPC...) carries no path: name it for the one-line error
        raise OSError(e.errno, e.strerror, str(dest)) from e
