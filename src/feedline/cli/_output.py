"""One ``--json`` convention for every command; lines on the terminal that quote file names.

``--json PATH`` writes the command's result as JSON to ``PATH``; ``--json -``
prints it to stdout instead of the text output. The destination is checked
before any work starts (:func:`check_json_dest`), so a missing folder is an
argument error, not a traceback after a long run.

File names are the user's data, and a hostile one carries terminal control
sequences (``ESC[2J`` clears the screen, ``ESC]0;...`` sets the window title,
``\r`` writes over the line). :func:`printable` shows them as escapes in every
warning and error line.
"""

from __future__ import annotations

import errno
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import typer

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with each control character (C0, DEL, C1: a file name's ESC, CR, newline,
    BEL) written as its Python escape (``\\x1b``, ``\\r``, ``\\n``), so one warning or error
    is one line and a file name cannot drive the terminal."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


JSON_HELP = "write the result as JSON to PATH ('-' prints it to stdout instead of text)"


def json_option(help: str = JSON_HELP) -> Any:
    """The typer option every command uses for ``--json``."""
    return typer.Option("--json", metavar="PATH", help=help)


def to_stdout(dest: str | Path | None) -> bool:
    """True when ``--json -`` asked for JSON on stdout (and no text output)."""
    return dest is not None and str(dest) == "-"


def check_exists(path: str | Path, what: str, hint: str) -> None:
    """A bad-argument error when ``path`` does not exist (before any work); ``~`` is the home
    folder, as in the Python API, also where the shell left it (quoted, or ``--out=~/x``)."""
    if not os.path.lexists(os.path.expanduser(path)):
        raise typer.BadParameter(f"{what} {str(path)!r} does not exist", param_hint=hint)


def check_json_dest(dest: str | Path | None, option: str = "--json") -> None:
    """Raise a usage error now if ``dest`` (the file of ``option``) cannot be written later:
    a command that runs for minutes (``diagnose``, ``demo``) must not lose its result then."""
    if dest is None or (option == "--json" and to_stdout(dest)):
        return
    path = Path(dest)
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise typer.BadParameter(f"{path} is a folder; give a file name", param_hint=option)
    if not parent.is_dir():
        raise typer.BadParameter(f"folder {parent} does not exist", param_hint=option)
    if not os.access(parent, os.W_OK):
        raise typer.BadParameter(f"folder {parent} is not writable", param_hint=option)


def _write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (a file, or a FIFO such as bash's ``>(jq .)``).

    Opened without blocking: a FIFO that no process reads is an error (ENXIO)
    instead of a command that waits forever after its work is done.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as e:
        if e.errno == errno.ENXIO:
            raise OSError(e.errno, "no process reads this FIFO (start the reader first)", str(path)) from None
        raise
    os.set_blocking(fd, True)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


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
        _write_text(Path(dest), text + "\n")
    except OSError as e:
        if e.filename is not None:
            raise
        # a failed write (ENOSPC...) carries no path: name it for the one-line error
        raise OSError(e.errno, e.strerror, str(dest)) from e
