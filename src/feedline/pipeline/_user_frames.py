"""The user's frame of a worker's exception: where in *their* code a sample failed.

A transform or dataset that raises inside a worker reaches the user as a
:class:`~feedline.errors.WorkerError` chained to the original exception. Printed
whole, that chain is mostly feedline's machinery (worker loop, stages, futures,
the iterator), and a process worker's cause arrives without any traceback. So:

- :func:`user_frame` finds the innermost frame of the user's code (not
  feedline's, not the standard library's nor an installed package's), which the
  error names as ``at='train.py:12 in tf'`` on its one line;
- :func:`from_user` drops feedline's leading frames from the cause's traceback,
  so the printed cause starts at the user's function;
- :func:`short` gives the consumer's re-raise a traceback of one frame.

The full text of the worker's traceback stays in ``err.traceback_text``, and
``FEEDLINE_DEBUG=1`` keeps every traceback whole.
"""

from __future__ import annotations

import functools
import os
import sysconfig
import traceback
from types import TracebackType

_COMPREHENSIONS = frozenset({"<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>"})
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


@functools.cache
def _libraries() -> tuple[str, ...]:
    """The folders of the standard library and of installed packages."""
    paths = sysconfig.get_paths()
    return tuple({os.path.abspath(p) + os.sep for name in ("stdlib", "platstdlib", "purelib", "platlib")
                  if (p := paths.get(name))})


def debugging() -> bool:
    """``FEEDLINE_DEBUG`` is set: keep every traceback whole."""
    return bool(os.environ.get("FEEDLINE_DEBUG"))


def _ours(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_PACKAGE)


def user_frame(tb: TracebackType | None) -> str | None:
    """``"path:line in function"`` of the innermost frame of ``tb`` in the user's code
    (not feedline's, the standard library's or an installed package's); ``None`` when
    there is none (a codec rejected the bytes: the fault is the data's)."""
    users = [f for f in traceback.extract_tb(tb)
             if not _ours(f.filename) and not os.path.abspath(f.filename).startswith(_libraries())]
    named = [f for f in users if f.name not in _COMPREHENSIONS]  # Python < 3.12's own frames
    if not users:
        return None
    f = (named or users)[-1]
    return f"{f.filename}:{f.lineno} in {f.name}"


def from_user(exc: BaseException) -> None:
    """Drop feedline's leading frames from ``exc``'s traceback when a later frame is not
    feedline's (the printed cause then starts in the user's function)."""
    tb = exc.__traceback__
    while tb is not None and _ours(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    if tb is not None and not debugging():
        exc.__traceback__ = tb


def short(err: BaseException) -> BaseException:
    """``err`` without the traceback it gathered in feedline's consumer machinery
    (futures, the worker pool): re-raised from the iterator, it shows one frame."""
    return err if debugging() else err.with_traceback(None)
