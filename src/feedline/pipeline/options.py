"""Checks of :class:`feedline.Loader`'s arguments that go beyond one value's range.

A user coming from ``torch.utils.data.DataLoader`` types its argument names
(``num_workers=``, ``pin_memory=``...); each gets an :class:`ArgumentError`
that names the feedline argument to use instead. Flags must be real booleans
(``shuffle="yes"`` is an error, not "truthy"), process-worker options are checked
before anything starts, and ``decode=`` may only name fields (or extensions of
fields) the dataset has.
"""

from __future__ import annotations

import difflib
import inspect
import os
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from feedline.errors import ArgumentError, ConfigError

# DataLoader argument -> what to do with feedline.Loader instead.
DATALOADER_NAMES: dict[str, str] = {
    "num_workers": "use workers= (worker threads or processes; default: the usable cores, "
                   "at most 8)",
    "pin_memory": "remove it: batches are pinned whenever device= is a CUDA device",
    "pin_memory_device": "use device= (the batches arrive there)",
    "persistent_workers": "remove it: feedline workers always persist across epochs",
    "prefetch_factor": "use prefetch= (finished batches allowed to wait ahead, in total, "
                       "not per worker)",
    "collate_fn": "use collate=",
    "worker_init_fn": "use transform= (runs in the workers) or set up state lazily in "
                      "the dataset",
    "multiprocessing_context": 'use worker_type="process" with start_method="fork" (the '
                               'default, where safe), "forkserver" or "spawn"',
    "sampler": "remove it: the order comes from shuffle= and seed=; sharding from "
               "process_group= or rank=/world_size=",
    "batch_sampler": "remove it: use batch_size=, shuffle=, seed= and drop_last=; batches of "
                     "similar lengths (a bucketing batch_sampler): lengths=, one per sample",
    "generator": "use seed= (the order is a function of seed and epoch)",
}


def check_unknown(unknown: Mapping[str, Any], accepted: Callable[..., Any]) -> None:
    """Refuse keyword arguments ``accepted`` does not take, with the name to use.

    Raises:
        ArgumentError: the first unknown name (a DataLoader name gets its feedline
            equivalent, any other the closest accepted names).
    """
    if not unknown:
        return
    name = sorted(unknown)[0]
    if name in DATALOADER_NAMES:
        raise ArgumentError(
            f"Loader has no argument {name}= (that is DataLoader's)",
            field=name, fix=DATALOADER_NAMES[name],
        )
    params = [p for p in inspect.signature(accepted).parameters
              if p not in ("self", "unknown")]
    close = difflib.get_close_matches(name, params, n=3)
    fix = f"did you mean {', '.join(c + '=' for c in close)}?" if close else (
        f"the arguments are {', '.join(params)}")
    raise ArgumentError(f"Loader got an unexpected keyword argument {name}=", field=name,
                        fix=fix)


MAX_WORKERS = 1024  # more threads or processes than this is a typo, not a plan
MAX_PREFETCH = 1 << 16


def positive_int(name: str, value: Any, maximum: int | None = None) -> int:
    """``value`` as an int in ``1..maximum`` (numpy integers accepted, bools refused).

    Raises:
        ArgumentError: not an integer (``"4"``, ``4.0``, ``True``, ``None``).
        ConfigError: below 1 or above ``maximum``.
    """
    return non_negative_int(name, value, maximum, minimum=1)


def non_negative_int(name: str, value: Any, maximum: int | None = None, minimum: int = 0) -> int:
    """``value`` as an int in ``minimum..maximum`` (see :func:`positive_int`)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ArgumentError(f"{name} must be an integer >= {minimum}, got {type(value).__name__} {value!r}",
                            field=name)
    value = int(value)
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"in {minimum}..{maximum}" if maximum is not None else f">= {minimum}"
        raise ConfigError(f"{name} must be an integer {bound}, got {value!r}", field=name)
    return value


def choice(name: str, value: Any, allowed: tuple[str, ...]) -> str:
    """``value`` if it is one of ``allowed``.

    Raises:
        ConfigError: anything else (a ``ValueError``), naming the choices.
    """
    if not isinstance(value, str) or value not in allowed:
        raise ConfigError(f"{name} must be one of {allowed}, got {value!r}", field=name)
    return value


def dataset_length(source: Any) -> int:
    """``len(source)``, with a map-style dataset whose ``__len__`` returns a negative number,
    a float or a non-number refused naming it (before: Python's own ``TypeError`` or
    ``ValueError`` "__len__() should return >= 0" from inside the Loader, raw)."""
    try:
        return len(source)
    except (TypeError, ValueError, OverflowError) as exc:
        got = getattr(getattr(source, "dataset", None), "__len__", None)
        try:
            value = repr(got()) if callable(got) else "?"
        except Exception:  # the user's __len__ may raise anything
            value = "?"
        raise ConfigError(f"the dataset's __len__() returned {value[:80]}: {exc}", field="dataset",
                          fix="make __len__ return the number of samples, an int >= 0") from exc


def check_lengths(lengths: Any, n: int) -> np.ndarray | None:
    """``lengths`` as a read-only int64 array of one value per sample, or None.

    Raises:
        ArgumentError: not a flat sequence of integers (a tensor is taken as its values).
        ConfigError: another count than the dataset's samples, or a negative length
            (``ds.sizes(field)`` gives -1 where a sample lacks the field).
    """
    if lengths is None:
        return None
    if hasattr(lengths, "numpy") and hasattr(lengths, "dtype"):
        lengths = lengths.detach().cpu().numpy()
    arr = np.asarray(lengths)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise ArgumentError(f"lengths must be one integer per sample, got {arr.dtype} of shape {arr.shape}",
                            field="lengths", fix="pass e.g. ds.sizes('wav'), or [len(x) for x in ...]")
    if len(arr) != n:
        raise ConfigError(f"lengths has {len(arr)} values for a dataset of {n} samples", field="lengths",
                          fix="one length per sample of the dataset given (a subset's own sizes())")
    if arr.size and int(arr.min()) < 0:
        raise ConfigError(f"lengths holds a negative value at sample {int(np.argmin(arr))} (a sample "
                          "without the field?)", field="lengths")
    out = np.array(arr, dtype=np.int64)
    out.setflags(write=False)
    return out


def check_callable(name: str, fn: Any) -> None:
    """``fn`` is None or callable.

    Raises:
        ArgumentError: anything else.
    """
    if fn is not None and not callable(fn):
        raise ArgumentError(f"{name} must be callable, got {fn!r}", field=name)


def check_stages(stages: Any) -> tuple[Any, ...]:
    """``stages`` as a tuple of callables, each with a str ``name``.

    Raises:
        ArgumentError: not a list or tuple, or an item that is not such a stage.
    """
    if not isinstance(stages, (list, tuple)):
        raise ArgumentError(f"stages must be a list of stages, got {stages!r}", field="stages")
    for stage in stages:
        if not callable(stage) or not isinstance(getattr(stage, "name", None), str):
            raise ArgumentError(f"each of stages must be callable with a str name, got {stage!r}",
                                field="stages")
    return tuple(stages)


def check_flag(name: str, value: Any) -> bool:
    """``value`` as a bool; only ``True``/``False`` (numpy's included) are accepted.

    Raises:
        ArgumentError: anything else (``"yes"``, ``1``, ``None``...).
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise ArgumentError(f"{name} must be True or False, got {value!r}", field=name,
                        fix=f"pass {name}=True or {name}=False")


def check_processes(worker_type: str, start_method: Any, shm_dir: Any) -> None:
    """Options of process workers, checked before any process or arena exists.

    With ``worker_type="auto"`` only the start method is checked (threads may be chosen,
    and they need no ``shm_dir``).

    Raises:
        ConfigError: a start method other than forkserver/spawn/fork.
        ResourceError: ``shm_dir`` is not a writable directory.
    """
    # types are checked whatever the workers (a wrong type is a bug); values only where used
    if not isinstance(shm_dir, str):
        raise ArgumentError(f"shm_dir must be a str path, got {shm_dir!r}", field="shm_dir")
    if not isinstance(start_method, str):
        raise ArgumentError(f'start_method must be a str ("fork", "forkserver", "spawn"), got {start_method!r}',
                            field="start_method")
    if worker_type == "thread":
        return
    if start_method not in ("forkserver", "spawn", "fork"):
        raise ConfigError(
            f'start_method must be "forkserver", "spawn" or "fork", got {start_method!r}',
            field="start_method",
            fix='use "fork" (the default; used only where it is safe, else the forkserver: '
                'see feedline.pipeline.forking), "forkserver" or "spawn"',
        )
    if worker_type != "process":
        return
    from feedline.pipeline import shm

    shm.check_dir(shm_dir)


def check_decode_fields(overrides: Iterable[str], fields: Iterable[str] | None) -> None:
    """Every ``decode=`` name must be a field of the dataset or the extension of one.

    ``fields`` is ``None`` when the dataset does not say (a map-style dataset).

    Raises:
        ConfigError: a name that matches no field; the fields that exist are listed.
    """
    if fields is None:
        return
    from feedline.decode.registry import extension

    names = list(fields)
    known = set(names) | {extension(f) for f in names}
    for name in overrides:
        if name not in known:
            raise ConfigError(
                f"decode= names {name!r}, but the dataset has no field or extension "
                f"{name!r}; its fields are {', '.join(names)}",
                field=name, fix="use one of the dataset's field names or extensions as key",
            )


class RepeatedOrderWarning(UserWarning):
    """A loader was iterated again over the same epoch: the order repeats."""


def warn_repeated_epoch(epoch: int) -> None:
    """Say (once per loader: the caller keeps track) that the order repeats."""
    warnings.warn(
        f"iterating the loader again without set_epoch(): epoch {epoch} and its order "
        "repeat. Call loader.set_epoch(epoch) before each pass (set_epoch with the same "
        "epoch repeats it on purpose, without this warning)",
        RepeatedOrderWarning, stacklevel=3,
    )


class _DefaultTrue:
    """``Loader``'s default ``drop_last``: True, told apart from a ``drop_last=True`` passed
    on purpose (only the default warns about an unshuffled loader's left-out tail)."""

    def __bool__(self) -> bool:
        return True

    def __repr__(self) -> str:
        return "True"


DROP_LAST: Any = _DefaultTrue()


class DroppedTailWarning(UserWarning):
    """An unshuffled loader with the default ``drop_last=True`` never reads its last samples."""


def warn_dropped_tail(n: int, batch_size: int, world: int) -> None:
    """Say that ``drop_last=True``, feedline's default (DataLoader's is False), leaves the same
    last samples out of every epoch of an unshuffled loader: an evaluation pass that reads
    ``n - left`` of its ``n`` samples, silently. A shuffled loader leaves out different ones
    each epoch (what training wants); an explicit ``drop_last=True`` is not warned about."""
    per_step = batch_size * world
    left = n % per_step
    if n < per_step or not left:
        return
    warnings.warn(
        f"shuffle=False with drop_last=True (feedline's default; DataLoader's is False): the last "
        f"{left} of the {n} samples are left out of every epoch ({n // per_step} full batches of "
        f"{batch_size}{f' on each of {world} ranks' if world > 1 else ''}). An evaluation reads them "
        "with drop_last=False (a short last batch); drop_last=True leaves them out without this "
        "warning",
        DroppedTailWarning, stacklevel=3,
    )


class SkippedSampleWarning(UserWarning):
    """``on_error="skip"`` skipped a bad sample (said once per loader)."""


def warn_skipped(skipped: dict[str, str]) -> None:
    """Say (once per loader: the caller keeps track) which sample was skipped and why, and
    where the later ones are counted: a skip is silent otherwise, and a dataset with many
    bad files trains on fewer distinct samples than it holds."""
    why = f"{skipped.get('error', 'error')}: {skipped['message']}" if skipped.get("message") else \
        skipped.get("error", "error")
    warnings.warn(
        f"on_error='skip': skipped sample {skipped['key']!r}"
        + (f" (file {skipped['file']!r})" if skipped.get("file") else "")
        + f" ({skipped.get('stage', '?')}: {why}); "
        "another sample of the epoch took its place in the batch. Later skips are not warned: "
        "loader.stats['skipped'] counts them, loader.stats['skipped_samples'] lists the last "
        "100 (feedline verify DIR --decode lists every undecodable sample of a packed dataset)",
        SkippedSampleWarning, stacklevel=5,
    )


class OversubscribedWarning(UserWarning):
    """More process workers than the cores this process may use."""


def warn_oversubscribed(workers: int, worker_type: str, cores: int) -> None:
    """Say that ``workers`` processes on ``cores`` cores cost start time and memory.

    Not capped (the user asked for that many, and a decode that waits on storage may
    want more): each process is an interpreter of its own, started from the forkserver and
    holding its own copy of what the dataset and transform touch. Measured on 2 cores:
    64 process workers 715 MiB PSS and 23 s for a 128-sample epoch, 2 workers 180 MiB
    and 5.6 s. Threads cost neither and are not warned about.
    """
    if worker_type != "process" or workers <= cores:
        return
    warnings.warn(
        f"workers={workers} processes on {cores} usable core(s): each is a Python "
        "interpreter of its own (9 MiB or more each, and seconds more to start on a "
        "busy host), and more than the cores only adds contention. Pass "
        f"workers={cores} (the default picks it), or worker_type=\"thread\" for decodes "
        "that wait on storage",
        OversubscribedWarning, stacklevel=3,
    )


class UnshardedWarning(UserWarning):
    """A Loader of one rank reads the whole dataset in a job of several processes."""


def warn_unsharded(environ: Mapping[str, str] | None = None) -> None:
    """Say that a Loader given no ``process_group=``, ``rank=`` or ``world_size=`` reads every
    sample on this rank although the job has several: ``WORLD_SIZE`` above 1 in the
    environment (torchrun's, the Loader does not read it) or an initialised
    ``torch.distributed`` group of several ranks. Each rank would train on the whole
    dataset, in the same order (an epoch seen ``world`` times), silently. Passing
    ``world_size=1`` says that is meant and is not warned about."""
    world = (environ if environ is not None else os.environ).get("WORLD_SIZE", "").strip()
    source = f"WORLD_SIZE={world} in the environment"
    if not (world.isdigit() and int(world) > 1):
        import sys

        dist = sys.modules.get("torch.distributed")
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return
        world = str(dist.get_world_size())
        source = f"torch.distributed is initialised with {world} ranks"
        if int(world) <= 1:
            return
    warnings.warn(
        f"{source}, but this Loader was given no process_group=, rank= or world_size=: "
        "every rank reads the whole dataset, in the same order. Pass "
        "process_group=torch.distributed.group.WORLD (or rank=, world_size=) to give each "
        "rank its part, or world_size=1 if each rank should read everything",
        UnshardedWarning, stacklevel=3,
    )


def check_io(io: Any, dataset: Any) -> None:
    """``io=`` names a read backend and applies to a dataset given as a path.

    An already opened dataset keeps the backend it was opened with; asking the
    loader for another one would be silently ignored, so it is an error.

    Raises:
        ConfigError: an unknown backend, or one that differs from the opened dataset's.
    """
    from feedline.io import IO_CHOICES

    if io not in IO_CHOICES:
        raise ConfigError(f"io must be one of {IO_CHOICES}, got {io!r}")
    if io == "auto" or isinstance(dataset, (str, os.PathLike)):
        return
    backend = getattr(dataset, "backend", None)
    opened = getattr(backend, "requested", None)
    if opened != io:
        what = f"was opened with io={opened!r}" if opened else "is not a packed feedline dataset"
        raise ConfigError(
            f"io={io!r} applies to a dataset given as a path; this dataset {what}",
            fix="pass the dataset's path to Loader, or open it with feedline.open_dataset(path, io=...)"
            if opened else "remove io= (it only chooses how packed shards are read)",
        )
