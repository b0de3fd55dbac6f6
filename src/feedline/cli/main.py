"""The ``feedline`` command: a thin typer front over the packages.

Each command lives in its own ``feedline.cli._<name>`` module exposing
``register(app)``; command bodies import their package lazily so ``feedline
--help`` stays fast. Errors: a bad argument prints one line and exits 2; a
:class:`~feedline.errors.FeedlineError` prints one line and exits 1 (2 for
:class:`~feedline.errors.ConfigError`). Set ``FEEDLINE_DEBUG=1`` for tracebacks.
"""

from __future__ import annotations

import os
import sys

import click
import typer

from feedline.cli import _demo, _diagnose, _doctor, _model, _shards
from feedline.errors import ConfigError, FeedlineError

app = typer.Typer(
    name="feedline",
    help="Keep GPUs fed: pack shards, load them fast, diagnose any training loop.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

for _module in (_demo, _shards, _model, _doctor, _diagnose):
    _module.register(app)


def _fail(message: str, code: int) -> None:
    print(f"feedline: error: {message}", file=sys.stderr)
    raise SystemExit(code)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the console script."""
    try:
        rv = app(args=argv, standalone_mode=False, prog_name="feedline")
    except click.exceptions.Exit as e:
        raise SystemExit(e.exit_code) from None
    except click.exceptions.Abort:
        _fail("aborted", 130)
    except click.UsageError as e:
        _fail(e.format_message().replace("\n", " "), 2)
    except click.ClickException as e:
        _fail(e.format_message().replace("\n", " "), e.exit_code)
    except ConfigError as e:
        if os.environ.get("FEEDLINE_DEBUG"):
            raise
        _fail(str(e), 2)
    except FeedlineError as e:
        if os.environ.get("FEEDLINE_DEBUG"):
            raise
        _fail(str(e), 1)
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    if isinstance(rv, int) and rv:
        raise SystemExit(rv)


if __name__ == "__main__":
    main()
