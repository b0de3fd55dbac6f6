"""The training script as process workers see it: a spawn/forkserver worker imports
``__main__`` again, so a loop outside the ``if __name__ == "__main__":`` guard, a script
read from stdin, or a dataset defined in a file-less ``__main__`` cannot start workers.
These checks say so before any worker starts."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import sys
from typing import Any

from feedline.errors import ConfigError

GUARD_FIX = ("put the training code under `if __name__ == \"__main__\":` (process workers start "
             "by forkserver or spawn, which import the script again), or use worker_type=\"thread\"")


def refuse_while_bootstrapping(what: str) -> None:
    """Refuse to run a loader in a process that is still importing the training script as
    a spawn/forkserver worker (a script without a ``__main__`` guard): the script's own
    loop would run again in every worker, unseen.

    Raises:
        ConfigError: this process is such a worker.
    """
    if getattr(mp.current_process(), "_inheriting", False):
        raise ConfigError(
            "this process is a worker process (spawn or forkserver) importing the training "
            f"script, and the script {what} at import time", fix=GUARD_FIX)

def unguarded_main() -> str | None:
    """Why process workers must not start for a loop run from here, or ``None``.

    A spawn/forkserver worker imports the training script (``__main__``) again, running
    its top level up to the loop (a model built, a GPU touched) before
    :func:`refuse_while_bootstrapping` stops it. So where the caller's stack runs the
    script's top level outside an ``if __name__ == "__main__":`` block (read from the
    script's source), ``worker_type="auto"`` stays on threads instead; likewise for a
    script read from stdin (:func:`main_references`). A script whose source cannot be
    parsed, or a ``__main__`` without a file (``-c``, a notebook: the workers do not
    import it), passes here (:func:`main_references` checks what the workers load).
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not isinstance(path, str) or main is None:
        return None
    if not os.path.isfile(path):
        return main_references()
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals is vars(main):
            blocks = _guarded_blocks(path)
            if blocks is None or any(a <= frame.f_lineno <= b for a, b in blocks):
                return None
            return (f"the script {os.path.basename(path)} runs the loop at its top level (line "
                    f"{frame.f_lineno}) without an `if __name__ == \"__main__\":` guard: process "
                    "workers would run it again")
        frame = frame.f_back  # type: ignore[assignment]
    return None


def _guarded_blocks(path: str) -> list[tuple[int, int]] | None:
    """The line ranges of the top-level ``if __name__ == "__main__":`` blocks of the script
    at ``path`` (``None`` when it cannot be read or parsed); read once per script."""
    key = (path, os.stat(path).st_mtime_ns) if os.path.exists(path) else (path, 0)
    if key not in _GUARDS:
        import ast

        try:
            with open(path, "rb") as f:
                tree = ast.parse(f.read())
        except (OSError, SyntaxError, ValueError):
            _GUARDS[key] = None
        else:
            def guard(test: ast.expr) -> bool:
                if not (isinstance(test, ast.Compare) and len(test.ops) == 1
                        and isinstance(test.ops[0], ast.Eq)):
                    return False
                sides = [test.left, test.comparators[0]]
                return (any(isinstance(x, ast.Name) and x.id == "__name__" for x in sides)
                        and any(isinstance(x, ast.Constant) and x.value == "__main__" for x in sides))
            _GUARDS[key] = [(n.lineno, n.end_lineno or n.lineno) for n in tree.body
                            if isinstance(n, ast.If) and guard(n.test)]
    return _GUARDS[key]


_GUARDS: dict[tuple[str, int], list[tuple[int, int]] | None] = {}


def main_from_stream() -> str | None:
    """Why no process worker can start from this script, or ``None``: it was read from
    stdin (``python - < train.py``, a heredoc) or a file since deleted, so
    ``__main__.__file__`` names no file, and every spawn/forkserver worker dies at start
    trying to import it again (multiprocessing runs ``__main__``'s path in each)."""
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    if not isinstance(path, str) or os.path.isfile(path):
        return None
    return (f"the script was read from {path}, not a file: process workers import the "
            "script again and cannot; run it as a file")


def main_references(*objs: Any) -> str | None:
    """Why process workers cannot load ``objs``, or ``None``. A script read from stdin
    (``__main__.__file__`` is ``"<stdin>"``) cannot be imported again by any worker. With
    a ``__main__`` that has no file (``python -c``, a notebook), anything of ``objs``
    defined there (a dataset class, a transform) pickles as a reference the workers cannot
    resolve (they do not import such a ``__main__``). Either way each worker would die
    while starting, printing why."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or (isinstance(path, str) and os.path.isfile(path)):
        return None
    streamed = main_from_stream()
    if streamed:
        return streamed
    try:
        data = pickle.dumps(objs)
    except Exception as exc:  # the start would fail the same way, saying so
        return f"what the workers need does not pickle ({type(exc).__name__}: {exc})"
    if b"__main__" not in data:
        return None
    return ("the dataset or a function is defined in __main__, which has no file (stdin, "
            "python -c, a notebook): process workers cannot import it; define it in a module")
