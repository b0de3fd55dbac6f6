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


def _click_kind(e: BaseException) -> str | None:
    names = {c.__name__ for c in type(e).__mro__}
    if not any(c.__module__.split(".")[0] in ("click", "typer") for c in type(e).__mro__):
        return None
    for kind in ("Exit", "Abort", "UsageError", "ClickException"):
        if kind in names:
            return kind
    return None


def main(argv: list[str] | None = None) -> None:
    """Entry point of the console script."""
    try:
        rv = app(args=argv, standalone_mode=False, prog_name="feedline")
    except ConfigError as e:
        if os.environ.get("FEEDLINE_DEBUG"):
            raise
        _fail(str(e), 2)
    except FeedlineError as e:
        if os.environ.get("FEEDLINE_DEBUG"):
            raise
        _fail(str(e), 1)
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
    except BrokenPipeError:  # `feedline ... | head`
        sys.stderr.close()
        raise SystemExit(0) from None
    if isinstance(rv, int) and rv:
        raise SystemExit(rv)


if __name__ == "__main__":
    main()
