"""In a process the measured command started: measure it if, and once, it trains.

``feedline diagnose -- python launch.py`` may train in other processes than the
one it starts: ranks started with ``torch.multiprocessing.spawn`` or
``multiprocessing.Process``, the workers ``torchrun`` starts, a launcher script
that runs ``python train.py``. Every Python process the command starts runs the
generated ``sitecustomize``, which loads this module by its file path (not
through the ``feedline.observe`` package, whose imports would cost every
subprocess half a second) and calls :func:`arm`. Arming costs nothing the
process would notice: one import-system finder that waits for
``torch.utils.data.dataloader`` to load, then puts a one-shot trigger on
``DataLoader.__iter__``, and a one-shot feedline.Loader step hook.

The first ``iter(DataLoader)`` or feedline.Loader ``next()`` in the process
fires the trigger: the process claims itself (its own subprocesses, its loader
workers among them, are then left alone) and starts a full measuring session
(:func:`feedline.observe._child.bootstrap` with ``descendant=True``) whose report
goes to ``proc-<pid>.json`` beside the command's own. A process that never
iterates a loader (a DataLoader worker started with ``spawn``, a tool the
script runs) writes nothing. ``feedline diagnose`` reports the command's own
process when it trained, else the descendant that did (rank 0 first, or the rank
waiting for data when rank 0 is not).

A process forked without exec (``multiprocessing.Process`` with ``fork``) runs no
``sitecustomize``: it inherits the measured process's hooks, which start
measuring it at its first ``iter(DataLoader)``
(:func:`feedline.observe._child.start_forked`). A feedline.Loader in a
descendant is found at its first ``next()`` (it publishes no ``iter`` hook), after
its process workers started untimed: its stages are then unknown.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

DATALOADER = "torch.utils.data.dataloader"


class _ThenLoader(Loader):
    """``inner``'s loader that calls ``then(module)`` once the module has executed."""

    def __init__(self, inner: Any, then: Callable[[ModuleType], None]) -> None:
        self.inner, self.then = inner, then

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        self.then(module)

    def __getattr__(self, name: str) -> Any:  # get_source (tracebacks), get_filename, ...
        return getattr(self.inner, name)


class AfterImport(MetaPathFinder):
    """Calls ``then(module)`` after the module ``name`` is first imported, then leaves."""

    def __init__(self, name: str, then: Callable[[ModuleType], None]) -> None:
        self.name, self.then = name, then

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> ModuleSpec | None:
        if fullname != self.name:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _ThenLoader(spec.loader, self.then)
        return spec


class Trigger:
    """Starts measuring this process at its first loader iteration (once).

    Args:
        start: called once, on the thread that iterates first, before that
            iteration goes on (it installs the measuring hooks).
    """

    def __init__(self, start: Callable[[], None]) -> None:
        self._start = start
        self._lock = threading.Lock()
        self._fired = False
        self._restore: list[Callable[[], None]] = []

    def arm(self) -> None:
        """Wait for torch's DataLoader module and a feedline.Loader step."""
        from feedline import spans

        sys.meta_path.insert(0, AfterImport(DATALOADER, self._on_dataloader))
        spans.install_step_hook(self._on_step)
        self._restore.append(lambda: spans.uninstall_step_hook(self._on_step))

    def _on_dataloader(self, module: ModuleType) -> None:
        cls = module.DataLoader
        orig = cls.__dict__["__iter__"]
        trigger = self

        def __iter__(loader: Any) -> Any:
            trigger.fire()
            return cls.__iter__(loader)  # the measuring hook now, or torch's own

        def restore() -> None:
            if cls.__dict__.get("__iter__") is __iter__:
                cls.__iter__ = orig

        cls.__iter__ = __iter__
        self._restore.append(restore)

    def _on_step(self, owner: Any, fetch: Callable[[], Any]) -> Any:
        from feedline import spans

        self.fire()
        hook = spans.step_hook()
        return hook(owner, fetch) if hook is not None and hook != self._on_step else fetch()

    def fire(self) -> None:
        """Remove the triggers and start measuring (the first call only)."""
        with self._lock:
            if self._fired:
                return
            self._fired = True
            for undo in reversed(self._restore):
                undo()
            self._restore.clear()
            self._start()


def arm() -> Trigger:
    """Arm this process (called from the generated sitecustomize)."""

    def start() -> None:
        from feedline.observe._child import bootstrap  # it claims the process

        bootstrap(descendant=True)

    trigger = Trigger(start)
    trigger.arm()
    return trigger
