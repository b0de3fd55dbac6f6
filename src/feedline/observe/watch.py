"""``feedline.watch``: measure any iterable loader from inside the training loop.

::

    w = feedline.watch(loader, device="cuda:0")
    for batch in w:
        train_step(batch)
    rep = w.report()          # Report: stages, stall, verdict, findings, ...

Each ``next()`` ends the previous step and times the wait for the next batch;
``w.step_done()`` marks the end of a step explicitly (so work after it, such
as logging, is not counted). Works on a torch DataLoader (worker fetch and
collate timed through hooks), a WebDataset pipeline, feedline's Loader (its
stage spans are recorded) or any other iterable. Other loaders iterated in the
loop body (a validation loader) are measured separately and reported as their
own lines; the watched one is the training loader.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from feedline.observe._session import Session
from feedline.observe.report import Report


class Watch:
    """A measuring wrapper around an iterable; see :func:`watch`."""

    def __init__(self, iterable: Iterable[Any], session: Session) -> None:
        self.iterable = iterable
        self.session = session
        self._report: Report | None = None

    def __iter__(self) -> Iterator[Any]:
        if self._report is not None:
            raise RuntimeError("this watch already reported; create a new feedline.watch(...)")
        session = self.session
        session.clocks.primary = self.iterable  # the watched loader is the training loader
        session.start()  # hooks first: workers inherit them
        inner = iter(self.iterable)

        def fetch() -> Any:
            return next(inner)

        while True:
            try:
                batch = session.next(self.iterable, fetch)
            except StopIteration:
                return
            yield batch

    def step_done(self) -> None:
        """Mark the end of the current step now (optional)."""
        self.session.step_done(self.iterable)

    def close(self) -> None:
        """Stop measuring and remove every hook (idempotent); ``report()`` still works.

        Call it (or use the watch as a context manager) when the loop ends by an
        exception, so no hook outlives the run.
        """
        self.session.stop()

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def report(self) -> Report:
        """Stop measuring (hooks removed) and return the :class:`Report` (cached)."""
        if self._report is None:
            self._report = self.session.report()
        return self._report


def watch(iterable: Iterable[Any], device: Any = "cpu", batch_size: int | None = None,
          name: str = "run", *, steps: int | None = None, ab: bool = False,
          replay: int = 10, host_interval: float = 0.5) -> Watch:
    """Wrap ``iterable`` so iterating it measures each training step.

    Args:
        iterable: the loader (DataLoader, WebDataset pipeline, feedline Loader...).
        device: where the loop body runs: ``"cpu"``, ``"cuda:0"``, a torch.device.
            On CUDA the body is timed with CUDA events (no per-step sync) and
            host-to-device copies are logged.
        batch_size: samples per batch (inferred from the first batch if None).
        name: the run's label in reports.
        steps: stop iterating after this many steps.
        ab: the synthetic-batch check: after the ``steps`` measured steps, the
            loop body sees the last batch ``replay`` more times with the data
            path removed. Needs ``steps`` (the run is cut there anyway); never
            runs otherwise, so an unlimited watched run is the user's run.
        replay: steps of the synthetic-batch check (>= 2).
        host_interval: seconds between host-signal samples (each costs about 0.6 ms
            of CPU in a sampler thread; 0.5 s keeps the overhead well under 1%).

    Raises:
        ValueError: a bad ``steps``, ``replay`` or ``batch_size``, or ``ab`` without ``steps``.
        TypeError: ``device`` is not a str, int or torch.device.
        DeviceError: a CUDA device without CUDA.
    """
    session = Session(name, device, batch_size, steps=steps, ab=ab, replay=replay,
                      host_interval=host_interval)
    return Watch(iterable, session)
