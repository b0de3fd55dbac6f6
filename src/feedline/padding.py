"""Pad fields of varying length per batch: speech clips, token lists, point clouds.

A DataLoader user writes this ``collate_fn`` by hand (``pad_sequence`` plus a
lengths tensor); :class:`PadCollate` is that collate for ``Loader(collate=...)``,
run in the workers::

    from feedline import audio, padding
    loader = feedline.Loader("data/speech", batch_size=16, decode={"wav": audio.decode_wav},
                             transform=audio.ClipTransform("wav", seconds=None),   # whole clips
                             collate=padding.PadCollate({"wav": None}, axis=-1))
    # batch["wav"]: float32[16, 1, longest], batch["wav_lengths"]: int64[16]

Each batch is padded to its own longest sample, so short clips cost little; the
fields not named are stacked when they can be (numbers, arrays of one shape) and
kept as lists otherwise (text, dicts such as a ``json`` field, bytes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["PadCollate", "pad_stack"]


def pad_stack(arrays: Sequence[Any], length: int | None = None, value: float = 0) -> tuple[np.ndarray, np.ndarray]:
    """Arrays of shapes ``[N_i, ...]`` (point clouds of N_i points) -> ``(padded[B, L, ...],
    mask[B, L])``: each padded with ``value`` (or cut) to ``L`` = ``length`` or the longest
    N_i, ``mask`` True where a row is real. Nested lists (a window of sweeps per sample)
    give ``[B, T, L, ...]`` and ``[B, T, L]``. Arrays of different dtypes are padded into
    the dtype that holds them all (``np.result_type``: int16 and float32 give float32).

    Raises:
        ValueError: no arrays, a single value or a non-numeric array among them, or
            arrays whose shapes differ beyond their first dimension."""
    if any(isinstance(a, (list, tuple)) for a in arrays):  # windows: lists, or stacked when alike
        flat = [a for seq in arrays for a in seq]
        if len({len(seq) for seq in arrays}) != 1:
            raise ValueError("pad_stack: the windows hold different numbers of arrays")
        padded, mask = pad_stack(flat, length, value)
        b, t = len(arrays), len(arrays[0])
        return padded.reshape(b, t, *padded.shape[1:]), mask.reshape(b, t, -1)
    arrs = [np.asarray(a) for a in arrays]
    if not arrs:
        raise ValueError("pad_stack: no arrays")
    flat = [k for k, a in enumerate(arrs) if a.ndim == 0 or a.dtype.kind not in "biufc"]
    if flat:
        a = arrs[flat[0]]
        raise ValueError(f"pad_stack: sample {flat[0]} is {'not numbers' if a.dtype.kind not in 'biufc' else 'a single value'} "
                         f"({a.dtype}, shape {a.shape}), not an array with a length to pad")
    size = max(a.shape[0] for a in arrs) if length is None else int(length)
    tail = arrs[0].shape[1:]
    if any(a.shape[1:] != tail for a in arrs):
        raise ValueError(f"pad_stack: arrays differ beyond their first dimension: "
                         f"{sorted({a.shape for a in arrs})[:4]}")
    padded = np.full((len(arrs), size, *tail), value, dtype=np.result_type(*arrs))
    mask = np.zeros((len(arrs), size), dtype=bool)
    for k, a in enumerate(arrs):
        m = min(size, a.shape[0])
        padded[k, :m] = a[:m]
        mask[k, :m] = True
    return padded, mask


def base_name(field: str) -> str:
    """``lidar.npy`` -> ``lidar``: the stem the added ``_lengths`` / ``_mask`` fields take."""
    return field.rsplit(".", 1)[0] if "." in field else field


class PadCollate:
    """A ``Loader(collate=...)`` that pads the fields named in ``pad`` to one length per batch.

    Args:
        pad: field -> the length to pad or cut to along ``axis``; ``None`` pads to the
            batch's longest.
        axis: the axis of the padded fields whose length varies: ``0`` (default) for
            rows (``N x C`` point clouds, token lists), ``-1`` for the time axis of
            ``[channels, frames]`` audio (:class:`feedline.audio.ClipTransform` with
            ``seconds=None``).
        lengths: add ``<name>_lengths`` (``int64[B]``, the real length of each sample, after
            any cut; ``<name>`` is the field without its extension), what
            ``pack_padded_sequence`` and CTC losses take.
        mask: add ``<name>_mask`` (``bool[B, L]``, True where a position is real).
        value: the padding value.

    The other fields: numbers and arrays of one shape are stacked into one tensor;
    strings, bytes, dicts (a ``json`` field) and ``None`` stay a list, as are ``__key__``
    and other ``__`` fields. An array field whose shapes differ and that ``pad`` does not
    name is a ``ValueError`` naming it (the fix: add it to ``pad``), as is a field that some
    samples of a batch lack, or a padded field holding a single value or text. Picklable,
    so process workers run it too.

    Raises:
        ValueError: (constructing) a ``pad`` length that is not None or an int >= 0.
    """

    def __init__(self, pad: Mapping[str, int | None] | None = None, *, axis: int = 0, lengths: bool = True,
                 mask: bool = False, value: float = 0) -> None:
        self.pad = dict(pad or {})
        for name, length in self.pad.items():
            if length is not None and (isinstance(length, bool) or not isinstance(length, (int, np.integer))
                                       or length < 0):
                raise ValueError(f"PadCollate: pad[{name!r}] must be None (the batch's longest) or a length >= 0, "
                                 f"got {length!r}")
        self.axis, self.lengths, self.mask, self.value = int(axis), bool(lengths), bool(mask), value

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        _same_fields(samples)
        out: dict[str, Any] = {}
        for name in samples[0]:
            values = [s[name] for s in samples]
            if name.startswith("__"):
                out[name] = values
            elif name in self.pad:
                try:
                    padded, real = pad_stack([_to_front(v, self.axis) for v in values], self.pad[name], self.value)
                    out[name] = torch.from_numpy(_from_front(padded, self.axis, real.ndim - 1))
                except ValueError as e:  # numpy's AxisError is one too
                    raise ValueError(f"field {name!r}: {e}") from None
                stem = base_name(name)
                if self.mask:
                    out[stem + "_mask"] = torch.from_numpy(real)
                if self.lengths:
                    out[stem + "_lengths"] = torch.from_numpy(real.sum(axis=-1, dtype=np.int64))
            else:
                out[name] = _stack(name, values)
        return out

    def __repr__(self) -> str:
        return f"PadCollate({self.pad!r}, axis={self.axis}, lengths={self.lengths}, mask={self.mask})"


def _same_fields(samples: list[dict[str, Any]]) -> None:
    """Every sample has the first one's fields: a field missing from one sample (or only in
    some) is an error naming it, never a ``KeyError`` or a field dropped from the batch."""
    first = samples[0].keys()
    for k, s in enumerate(samples[1:], 1):
        if s.keys() != first:
            missing, extra = sorted(first - s.keys()), sorted(s.keys() - first)
            parts = ([f"lacks {missing}"] if missing else []) + ([f"has {extra} that sample 0 lacks"] if extra else [])
            raise ValueError(f"sample {k} of the batch {' and '.join(parts)}: PadCollate needs the same fields in "
                             "every sample (give every sample the field, or drop it in a transform)")


def _to_front(value: Any, axis: int) -> Any:
    if isinstance(value, (list, tuple)):
        return [_to_front(v, axis) for v in value]
    return np.moveaxis(np.asarray(value), axis, 0) if axis else value


def _from_front(padded: np.ndarray, axis: int, lead: int) -> np.ndarray:
    """Put the padded axis (just after the ``lead`` batch/window axes) back where it was."""
    if not axis:
        return padded
    return np.ascontiguousarray(np.moveaxis(padded, lead, axis if axis < 0 else lead + axis))


def _stack(name: str, values: list[Any]) -> Any:
    import torch

    if not all(_numeric(v) for v in values):
        return values
    arrays = [np.asarray(v) for v in values]
    if len({a.shape for a in arrays}) > 1:
        raise ValueError(f"field {name!r}: its samples differ in shape ({sorted({a.shape for a in arrays})[:3]}); "
                         f"pad it: PadCollate(pad={{{name!r}: None}})")
    return torch.as_tensor(np.stack(arrays))


def _numeric(value: Any) -> bool:
    if isinstance(value, (bool, int, float, np.generic)):
        return not isinstance(value, (np.str_, np.bytes_, np.void))
    if isinstance(value, np.ndarray):
        return value.dtype.kind in "biufc"
    return type(value).__name__ == "Tensor"
