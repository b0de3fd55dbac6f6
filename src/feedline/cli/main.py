"""The ``feedline`` command: a thin typer front over the packages.

Each command lives in its own ``feedline.cli._<name>`` module exposing
``register(app)``; command bodies import their package lazily so ``feedline
--help`` stays fast. Errors: a bad argument prints one line and exits 2; a
:class:`~feedline.errors.FeedlineError` prints one line and exits 1 (2 for
:class:`~feedline.errors.ConfigError`, which means a bad argument); an
``OSError`` (disk full, permission denied, read-only file system...) prints one
line naming the path and exits 1. Set ``FEEDLINE_DEBUG=1`` for tracebacks.
A reader that stops reading stdout (``feedline inspect DS | head -1``) ends the
command quietly with 141, as SIGPIPE ends other tools (click and rich made it a
silent exit 1, the status of a runtime error).

Help output: flags show no ``<bool>`` type, options marked ``hidden`` stay out.
"""

from __future__ import annotations

import errno
import os
import sys
from types import SimpleNamespace
from typing import Any

import typer

from feedline.cli import _demo, _diagnose, _doctor, _model, _shards
from feedline.cli._output import printable
from feedline.errors import ConfigError, FeedlineError

_HELP_NAMES = ("-h", "--help")

app = typer.Typer(
    name="feedline",
    help="Keep GPUs fed: pack shards, load them fast, diagnose any training loop.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": list(_HELP_NAMES)},
)



def _version(value: bool) -> None:
    if value:
        from feedline import __version__

        typer.echo(f"feedline {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="print the version and exit"
    ),
) -> None:
    """Keep GPUs fed: pack shards, load them fast, diagnose any training loop."""


for _module in (_demo, _shards, _model, _doctor, _diagnose):
    _module.register(app)


def _tidy_help(command: Any) -> Any:
    """Flags take no value: show no type (typer would print ``<bool>``) beside them.

    typer vendors its own click, so parameters are matched by their attributes.
    The help option is made (and cached by click) here so that it is tidied too.
    """
    names = SimpleNamespace(help_option_names=list(_HELP_NAMES))
    helper = command.get_help_option(names)
    for param in [*command.params, *([helper] if helper is not None else [])]:
        if getattr(param, "is_flag", False) and not getattr(param, "count", False):
            param.metavar = ""
    for sub in getattr(command, "commands", {}).values():
        _tidy_help(sub)
    return command


def command() -> Any:
    """The click command behind ``feedline`` (help tidied)."""
    return _tidy_help(typer.main.get_command(app))


_OS_HINTS = {
    errno.ENOSPC: "free space on that file system or write elsewhere",
    errno.EDQUOT: "free space within your quota or write elsewhere",
    errno.EACCES: "check the permissions, or choose a path you may write",
    errno.EPERM: "check the permissions, or choose a path you may write",
    errno.EROFS: "the file system is read-only: write elsewhere",
    errno.ENOENT: "check the path",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.EISDIR: "give a file name, not a folder",
    errno.ELOOP: "the path has a symbolic-link loop",
    errno.ENAMETOOLONG: "use a shorter path",
    errno.EMFILE: "raise the open-file limit (ulimit -n)",
}


def os_error_line(e: OSError) -> str:
    """One line for an ``OSError``: what failed, on which path, what to do."""
    what = e.strerror or type(e).__name__
    paths = [str(p) for p in (e.filename, e.filename2) if p is not None]
    text = f"{what}: {' -> '.join(paths)}" if paths else f"{what} ({e})"
    hint = _OS_HINTS.get(e.errno or -1)
    return f"{text}. Fix: {hint}" if hint else text


def _fail(message: str, code: int) -> None:
    print(f"feedline: error: {printable(message)}", file=sys.stderr)
    raise SystemExit(code)


def _click_kind(e: BaseException) -> str | None:
    names = {c.__name__ for c in type(e).__mro__}
    if not any(c.__module__.split(".")[0] in ("click", "typer") for c in type(e).__mro__):
        return None
    for kind in ("Exit", "Abort", "UsageError", "ClickException"):
        if kind in names:
            return kind
    return None


EXIT_PIPE = 128 + 13  # the status of a process ended by SIGPIPE, as `yes | head -1` gives


def _reader_gone() -> None:
    """``feedline inspect DS | head -1``: the reader stopped reading. Quietly, with the
    status every Unix tool ends with there (141, killed by SIGPIPE): a shell reports the
    pipeline's last command unless ``set -o pipefail`` asks to know that the first one did
    not finish (``feedline verify DS | head`` must not pass a check it never completed).
    Whatever is still buffered for stdout goes to ``/dev/null``, so the flush at exit
    cannot fail again (Python would print a traceback and exit 120)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass  # stdout is already closed or replaced: nothing left to flush
    raise SystemExit(EXIT_PIPE) from None


def _tolerant_output() -> None:
    """Characters stdout cannot encode are written escaped (``\\xe7``), not raised: with
    ``PYTHONIOENCODING=ascii`` or a POSIX locale, a non-ASCII dataset path in a summary
    line ended a pack that had succeeded in a ``UnicodeEncodeError`` traceback (exit 1), and
    a file name that is not UTF-8 (held as surrogates) does so under any locale."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and getattr(stream, "errors", None) == "strict":
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):  # closed, or not a text stream of ours
                pass


def main(argv: list[str] | None = None) -> None:
    """Entry point of the console script."""
    _tolerant_output()
    try:
        rv = command().main(args=argv, standalone_mode=False, prog_name="feedline")
    except SystemExit as e:
        if isinstance(e.__context__, BrokenPipeError):  # click's and rich's exit(1) on EPIPE
            _reader_gone()
        raise
    except ConfigError as e:
        if os.environ.get("FEEDLINE_DEBUG"):
            raise
        _fail(str(e), 2)
    except FeedlineError as e:
        if os.environ.get("FEEDLINE_DEBUG"):
            raise
        _fail(str(e), 1)
    except BrokenPipeError:
        _reader_gone()
    except OSError as e:
        if os.environ.get("FEEDLINE_DEBUG"):
            raise
        _fail(os_error_line(e), 1)
    except Exception as e:
        # typer >= 0.22 vendors its own copy of click, so match click's exception
        # classes by name: click.UsageError and typer's copy both end up here.
        kind = _click_kind(e)
        if kind is None:
            raise
        if kind in ("Exit", "SystemExit"):
            raise SystemExit(getattr(e, "exit_code", getattr(e, "code", 0))) from None
        if kind == "Abort":
            _fail("aborted", 130)
        code = 2 if kind == "UsageError" else int(getattr(e, "exit_code", 1))
        _fail(e.format_message().replace("\n", " "), code)  # type: ignore[attr-defined]
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    if isinstance(rv, int) and rv:
        raise SystemExit(rv)


if __name__ == "__main__":
    main()
