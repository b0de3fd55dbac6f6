"""Walk nested batches and apply a function to every tensor leaf.

Supported containers: ``dict`` (and Mapping subclasses constructible from
items), ``list``, ``tuple``, namedtuples and dataclass instances. An object
with its own ``pin_memory()`` / ``to()`` methods (the custom-batch contract of
PyTorch's DataLoader) is handled by calling those methods. Every other leaf
passes through unchanged. :func:`tensors` also looks inside such objects (their
attributes), since every device tensor of a batch needs ``record_stream``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import torch

TensorFn = Callable[[torch.Tensor], torch.Tensor]


def _is_namedtuple(obj: Any) -> bool:
    return isinstance(obj, tuple) and hasattr(obj, "_fields")


def map_tensors(obj: Any, fn: TensorFn, *, method: str | None = None, **kwargs: Any) -> Any:
    """Return ``obj`` with every tensor leaf replaced by ``fn(leaf)``.

    Args:
        obj: the (nested) batch.
        fn: applied to each ``torch.Tensor`` leaf.
        method: for objects that are not containers but define this method
            (``"pin_memory"`` or ``"to"``), call ``obj.method(**kwargs)`` instead.
    """
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, (str, bytes, bytearray, int, float, bool)) or obj is None:
        return obj
    if isinstance(obj, Mapping):
        items = {k: map_tensors(v, fn, method=method, **kwargs) for k, v in obj.items()}
        return items if type(obj) is dict else _rebuild_mapping(obj, items)
    if _is_namedtuple(obj):
        return type(obj)(*(map_tensors(v, fn, method=method, **kwargs) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(map_tensors(v, fn, method=method, **kwargs) for v in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {
            f.name: map_tensors(getattr(obj, f.name), fn, method=method, **kwargs)
            for f in dataclasses.fields(obj)
            if f.init
        }
        return dataclasses.replace(obj, **changes)
    if method is not None and callable(getattr(obj, method, None)):
        return getattr(obj, method)(**kwargs)
    return obj


def _rebuild_mapping(obj: Mapping[Any, Any], items: dict[Any, Any]) -> Any:
    try:
        return type(obj)(items)  # type: ignore[call-arg]
    except TypeError:
        return items


def tensors(obj: Any) -> list[torch.Tensor]:
    """Every tensor in ``obj``, each once: container leaves, and the tensors held in the
    attributes (``__dict__``, ``__slots__``) of any other object, so the device tensors a
    custom batch's ``to()`` made are found too (the copy engine must ``record_stream`` every
    one: a tensor it misses can have its memory handed to the next batch's copy while the
    user's kernels still read it). Cycles and shared objects are walked once."""
    found: list[torch.Tensor] = []
    seen: set[int] = set()
    stack: list[tuple[Any, int]] = [(obj, 0)]
    while stack:
        o, depth = stack.pop()
        if isinstance(o, torch.Tensor):
            if id(o) not in seen:
                seen.add(id(o))
                found.append(o)
            continue
        if o is None or isinstance(o, _LEAVES) or callable(o) or depth > _MAX_DEPTH or id(o) in seen:
            continue
        seen.add(id(o))
        children: Any
        if isinstance(o, Mapping):
            children = o.values()
        elif isinstance(o, (list, tuple, set, frozenset)):
            children = o
        else:
            children = _attributes(o)
        stack.extend((c, depth + 1) for c in reversed(list(children)))
    return found


_LEAVES = (str, bytes, bytearray, memoryview, int, float, complex, bool, torch.device, torch.dtype, type)
_MAX_DEPTH = 64


def _attributes(o: Any) -> list[Any]:
    """The values of ``o``'s instance attributes (``__dict__`` and ``__slots__``)."""
    values = list(vars(o).values()) if isinstance(getattr(o, "__dict__", None), dict) else []
    for cls in type(o).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name not in ("__dict__", "__weakref__"):
                try:
                    values.append(object.__getattribute__(o, name))
                except AttributeError:
                    pass  # an empty slot
    return values


def pin(obj: Any) -> Any:
    """Pin every CPU tensor leaf that is not pinned yet; custom objects via ``pin_memory()``."""

    def pin_one(t: torch.Tensor) -> torch.Tensor:
        return t if t.device.type != "cpu" or t.is_pinned() else t.pin_memory()

    return map_tensors(obj, pin_one, method="pin_memory")


def move(obj: Any, device: torch.device, *, non_blocking: bool = True) -> Any:
    """Move every tensor leaf to ``device``; custom objects via ``to(device, non_blocking=)``."""

    def move_one(t: torch.Tensor) -> torch.Tensor:
        return t.to(device, non_blocking=non_blocking)

    return map_tensors(
        obj, move_one, method="to", device=device, non_blocking=non_blocking
    )
