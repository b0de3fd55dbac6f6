"""Inside the process ``feedline diagnose`` runs: hooks that measure the user's script.

The parent puts a generated ``sitecustomize.py`` first on ``PYTHONPATH``; it
calls :func:`bootstrap` in the training process only (the process claims
itself through ``FEEDLINE_DIAGNOSE_PID``, so its subprocesses stay untouched).
:func:`bootstrap` starts a :class:`~feedline.observe._session.Session`, hooks
iteration of ``torch.utils.data.DataLoader`` and of ``feedline.Loader``, and
writes the report as JSON at interpreter exit (also after ``--steps`` ends
the run with ``SystemExit(0)``).

Step boundaries are consecutive ``next()`` calls on the *outermost* loader of
the main thread: the first loader stepped there becomes the step source;
loaders iterated inside it (nested) or other loaders are timed as stages only.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from feedline.observe._session import Session, loader_config

CONFIG_ENV = "FEEDLINE_DIAGNOSE"
PID_ENV = "FEEDLINE_DIAGNOSE_PID"
MAX_RESULT_SPANS = 200_000


class LoaderHooks:
    """Patches DataLoader / feedline Loader iteration to drive ``session``."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.source: int | None = None
        self.configs: dict[int, dict[str, Any]] = {}
        self._depth = threading.local()

    def _nested(self, fn: Callable[[], Any]) -> Any:
        self._depth.n = getattr(self._depth, "n", 0) + 1
        try:
            return fn()
        finally:
            self._depth.n -= 1

    def _on_limit(self) -> None:
        self.session.notes.append(f"run stopped by diagnose after {self.session.steps} steps")
        raise SystemExit(0)

    def step(self, owner: int, fetch: Callable[[], Any]) -> Any:
        """One ``next()`` of a hooked loader identified by ``owner``."""
        if getattr(self._depth, "n", 0) or threading.current_thread() is not threading.main_thread():
            return self._nested(fetch)
        if self.source is None:
            self.source = owner
            self.session.loader = self.configs.get(owner, {})
        if owner != self.source:
            return self._nested(fetch)
        return self.session.next(lambda: self._nested(fetch), on_limit=self._on_limit)

    def install(self) -> None:
        """Patch torch's DataLoader and, where it exists, feedline's Loader."""
        from torch.utils.data import dataloader as dl

        hooks = self
        orig_iter, orig_next = dl.DataLoader.__iter__, dl._BaseDataLoaderIter.__next__

        def dl_iter(loader: Any) -> Any:
            it = orig_iter(loader)
            hooks.configs.setdefault(id(loader), loader_config(loader))
            setattr(it, "_feedline_owner", id(loader))  # noqa: B010
            return it

        def dl_next(it: Any) -> Any:
            return hooks.step(getattr(it, "_feedline_owner", id(it)), lambda: orig_next(it))

        setattr(dl.DataLoader, "__iter__", dl_iter)  # noqa: B010
        setattr(dl._BaseDataLoaderIter, "__next__", dl_next)  # noqa: B010
        self._hook_feedline_loader()

    def _hook_feedline_loader(self) -> None:
        try:
            import feedline.pipeline as pipeline

            cls = getattr(pipeline, "Loader", None)
        except Exception as e:  # a broken optional package must not break the user's run
            self.session.notes.append(f"feedline.Loader not hooked: {type(e).__name__}: {e}")
            return
        if cls is None:
            return
        hooks, orig_iter = self, cls.__iter__

        def loader_iter(loader: Any) -> Iterator[Any]:
            hooks.configs.setdefault(id(loader), loader_config(loader))
            inner = iter(orig_iter(loader))
            while True:
                try:
                    batch = hooks.step(id(loader), lambda: next(inner))
                except StopIteration:
                    return
                yield batch

        cls.__iter__ = loader_iter


def _finish(session: Session, result: Path) -> None:
    try:
        rep = session.report()
        data = rep.to_dict(include_spans=True)
        data["spans"] = data["spans"][:MAX_RESULT_SPANS]
        tmp = result.with_suffix(".tmp")
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, result)
    except Exception:  # report the failure loudly; the user's exit status stays intact
        print("feedline diagnose: could not write the report:", file=sys.stderr)
        traceback.print_exc()


def bootstrap() -> None:
    """Start measuring this process (called from the generated sitecustomize)."""
    cfg = json.loads(Path(os.environ[CONFIG_ENV]).read_text(encoding="utf-8"))
    os.environ[PID_ENV] = str(os.getpid())
    import torch

    device = cfg.get("device") or "auto"
    if device == "auto":
        device = "cuda:0" if torch.cuda.is_available() else "cpu"
    session = Session(cfg.get("name") or "run", device, steps=cfg.get("steps"),
                      ab=cfg.get("ab"), replay=int(cfg.get("replay") or 10))
    session.start()
    LoaderHooks(session).install()
    atexit.register(_finish, session, Path(cfg["result"]))
