"""The two measured training runs: the same model, steps and batch size.

:func:`measured_run` trains a fresh copy of one initial model for a fixed
number of steps over any iterable of batches, wrapped in
:func:`feedline.watch`, and returns the report with the losses. The "before"
run copies each batch to the device the way the seed's code does (a blocking
``.to(device)`` from pageable memory, timed as the ``h2d`` stage); the
"after" run receives batches that ``feedline.Loader`` already put on the device.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from feedline import spans
from feedline.demo import _parts
from feedline.demo.model import DemoNet, train_step
from feedline.errors import DeviceError, FeedlineError

LEARNING_RATE = 2e-3
T = TypeVar("T")


def pick_device(device: str | None) -> str:
    """``device`` checked, or ``"cuda"`` when a GPU is present, else ``"cpu"``.

    Raises:
        ValueError: ``device`` is neither ``cpu`` nor ``cuda[:N]``.
        DeviceError: a CUDA device was asked for and there is none.
    """
    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(device)
    except RuntimeError as e:
        raise ValueError(f"device must be 'cpu' or 'cuda[:N]', got {device!r}") from e
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda[:N]', got {device!r}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise DeviceError(
            f"device {device!r} requested but CUDA is not available",
            stage="demo",
            fix="run with --device cpu, or on a machine with a CUDA GPU",
        )
    return device


def to_device(batch: Mapping[str, Any], device: torch.device) -> dict[str, Any]:
    """The seed's copy: every tensor (and tensor in a list) ``.to(device)``, blocking."""
    out: dict[str, Any] = {}
    for key, value in batch.items():
        if isinstance(value, torch.Tensor):
            out[key] = value.to(device)
        elif isinstance(value, list) and value and isinstance(value[0], torch.Tensor):
            out[key] = [v.to(device) for v in value]
        else:
            out[key] = value
    return out


@dataclass
class RunOutcome:
    """What one measured run produced: the watch report, losses, wall time."""

    report: Any
    losses: list[float]
    wall_s: float


def _fresh(init: dict[str, torch.Tensor], imu_shape: tuple[int, int], device: torch.device
           ) -> tuple[DemoNet, torch.optim.Optimizer]:
    model = DemoNet(imu_shape).to(device)
    model.load_state_dict(init)
    return model, torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)


def cycle(batches: Iterable[T], steps: int, *, name: str, epochs: Any = None) -> Iterator[T]:
    """Exactly ``steps`` items of ``batches``, iterating it again as often as needed.

    ``epochs``: the loader under ``batches`` (it may be ``batches`` itself); when it
    has ``set_epoch``, pass ``n`` is epoch ``n`` (a new order, as in training).

    Raises:
        ValueError: a pass over ``batches`` yields nothing.
    """
    done, epoch = 0, 0
    set_epoch = getattr(epochs, "set_epoch", None)
    while done < steps:
        before = done
        if set_epoch is not None:
            set_epoch(epoch)
        epoch += 1
        for batch in batches:
            yield batch
            done += 1
            if done == steps:
                return
        if done == before:
            raise ValueError(f"run {name!r}: the loader yielded no batches")


def warm_up(init: dict[str, torch.Tensor], imu_shape: tuple[int, int],
            loaders: Iterable[Iterable[Mapping[str, Any]]], device: str, steps: int = 10) -> None:
    """Train a throwaway copy for ``steps`` batches of each loader, unmeasured.

    One-time costs (kernel selection, allocator growth, first-touch page
    faults, loader start-up) land here instead of in whichever run goes
    first, so the order of the runs does not decide the comparison.
    """
    dev = torch.device(device)
    model, opt = _fresh(init, imu_shape, dev)
    for loader in loaders:
        for batch in cycle(loader, steps, name="warm-up", epochs=loader):
            train_step(model, opt, to_device(batch, dev), dev)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _verify(name: str, batch: Mapping[str, Any],
            verify: Callable[[Mapping[str, Any]], list[str]]) -> None:
    problems = verify(batch)
    if problems:
        raise FeedlineError(
            f"run {name!r}: the first batch is wrong: {problems[0]}"
            + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""),
            stage="collate", fix="check the loader's collate of multi-rate and ragged fields",
        )


def measured_run(
    batches: Iterable[Mapping[str, Any]],
    *,
    name: str,
    init: dict[str, torch.Tensor],
    imu_shape: tuple[int, int],
    device: str,
    steps: int,
    batch_size: int,
    copy_to_device: bool,
    on_step: Callable[[], None] | None = None,
    verify: Callable[[Mapping[str, Any]], list[str]] | None = None,
) -> RunOutcome:
    """Train a fresh model from ``init`` for exactly ``steps`` steps, watched.

    Args:
        batches: re-iterable batches (a DataLoader or a feedline Loader); it is
            iterated again when one pass has fewer than ``steps`` batches.
        copy_to_device: copy each batch with :func:`to_device` inside an
            ``h2d`` span (the "before" code); otherwise batches arrive on device.
        on_step: called after each step (progress bars).
        verify: checks the first batch (in the first step, which the report
            counts as warm-up); returns problems, each one line.

    Raises:
        ValueError: ``batches`` yields nothing.
        FeedlineError: ``verify`` found a problem in the first batch.
    """
    dev = torch.device(device)
    model, opt = _fresh(init, imu_shape, dev)
    watched = _parts.watch(batches, device=device, batch_size=batch_size, name=name)
    losses: list[torch.Tensor] = []
    start = time.perf_counter()
    with watched:  # hooks come off even when a step raises
        for batch in cycle(watched, steps, name=name, epochs=batches):
            if copy_to_device:
                with spans.span("h2d"):
                    batch = to_device(batch, dev)
            if verify is not None and not losses:
                _verify(name, batch, verify)
            losses.append(train_step(model, opt, batch, dev))
            if on_step is not None:
                on_step()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    wall = time.perf_counter() - start
    return RunOutcome(watched.report(), [float(x) for x in losses], wall)
