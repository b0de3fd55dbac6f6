"""The checkpoint format: a JSON header and one flat binary file of aligned payloads.

A state (any nested dict/list/tuple of tensors, numpy arrays and plain values)
is split once into a JSON *skeleton* and a list of *leaves* (the tensors and
arrays). A tensor reached twice (tied weights: ``state_dict()`` lists the
embedding and the head that shares it) is stored once: both entries name the
same bytes, and they load as one tensor, shared again as they were saved. Each leaf gets a :class:`TensorEntry`: its path name, kind (``torch``
or ``numpy``), dtype, shape, byte offset and size in the data file, and, once
written, its xxh3-64 checksum. Nothing is pickled: loading parses JSON and
views raw bytes.

Placement (:func:`place`): a tensor of :data:`PAGE` bytes or more starts on a
4096-byte boundary; a smaller one is packed at the next multiple of
:data:`SMALL_ALIGN` (64 bytes: aligned for every dtype, one cache line) after
the previous payload, so small tensors share pages (the gap after a large
tensor's unaligned end included) and cost about their size: 10^5 tensors of
1-64 floats took 392 MiB when each had its own page, 14 MiB packed. The data
file is written from one aligned buffer (O_DIRECT in whole pages, the tail
buffered) and read whole, so payload placement inside it does not affect
direct I/O. Version 1 files (every payload page-aligned) still load.

Skeleton encoding (plain JSON where it can be): a leaf is ``{"__tensor__": i}``;
a dict whose keys are all strings not starting with ``__`` is a JSON object,
any other dict is ``{"__dict__": [[key, value], ...]}`` (optimizer states have
integer keys); a tuple is ``{"__tuple__": [...]}``; bytes are
``{"__bytes__": base64}``; a numpy scalar is ``{"__scalar__": dtype, "value": x}``
(checked before the plain types: ``np.float64`` and ``np.str_`` are also
``float`` and ``str``, and would otherwise come back as them, or, for a
non-finite ``np.float64``, as a header that does not load).

What cannot be stored is refused at ``save()`` with a :class:`ConfigError`
naming its path: objects that need pickle, a state that contains itself or is
nested more than :data:`MAX_DEPTH` containers deep, and tensors without plain
dense bytes (sparse, nested, quantized, ``meta``). A header is untrusted input
on load: every index, offset, size, dtype and shape in it is checked, and any
inconsistency is a :class:`FormatError`, never a wrong tensor; nor are two payloads that
overlap, unless they are the one tensor a save stored once for two names.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from feedline.dense import why_not_dense
from feedline.errors import ConfigError, FormatError
from feedline.io._buffers import PAGE

FORMAT = "feedline-checkpoint"
VERSION = 2  # 2: tensors below PAGE bytes packed at SMALL_ALIGN (1: every tensor page-aligned)
READ_VERSIONS = (1, 2)
SMALL_ALIGN = 64  # >= the largest itemsize (complex128: 16), so every dtype view of a payload is aligned
_MARKERS = ("__tensor__", "__dict__", "__tuple__", "__bytes__", "__scalar__")
MAX_DEPTH = 200  # nested containers in a state; Python's own recursion limit is 1000


@dataclass(frozen=True, slots=True)
class TensorEntry:
    """Where one tensor's bytes live in the data file, and what they are."""

    name: str
    kind: str  # "torch" or "numpy"
    dtype: str  # "float32", "bfloat16" (torch names) or a numpy dtype.str ("<f4")
    shape: tuple[int, ...]
    offset: int
    nbytes: int
    checksum: int = 0

    def to_json(self) -> dict[str, Any]:
        """The header record of this tensor (checksum as 16 hex digits)."""
        return {"name": self.name, "kind": self.kind, "dtype": self.dtype, "shape": list(self.shape),
                "offset": self.offset, "nbytes": self.nbytes, "xxh3": f"{self.checksum:016x}"}


@dataclass(frozen=True, slots=True)
class Layout:
    """A state split into skeleton, leaves and their places: made once per save."""

    skeleton: Any
    leaves: tuple[Any, ...]
    entries: tuple[TensorEntry, ...]
    data_bytes: int  # end of the last payload (not padded: the tail may be unaligned)
    first: tuple[int, ...] = ()  # first[i]: the leaf whose payload leaf i shares (i when its own); () = all own

    def owns(self, i: int) -> bool:
        """Whether leaf ``i`` has its own payload (False: the same tensor as an earlier leaf, stored once)."""
        return not self.first or self.first[i] == i

    def devices(self) -> set[str]:
        """Device types of the torch leaves (``{"cpu"}``, ``{"cuda"}``...)."""
        return {leaf.device.type for leaf in self.leaves if not isinstance(leaf, np.ndarray)}


def align_up(n: int, align: int = PAGE) -> int:
    """``n`` rounded up to a multiple of ``align``."""
    return -(-n // align) * align


def place(offset: int, nbytes: int) -> int:
    """Where a payload of ``nbytes`` goes when the previous one ends at ``offset``."""
    return align_up(offset, PAGE if nbytes >= PAGE else SMALL_ALIGN)


def _torch() -> Any:
    import torch

    return torch


def _is_torch_tensor(value: Any) -> bool:
    cls = type(value)
    if cls in _PLAIN:
        return True
    return cls.__module__.startswith("torch") and hasattr(value, "untyped_storage") and hasattr(value, "dtype")


def _leaf_meta(value: Any, name: str) -> tuple[str, str, tuple[int, ...], int]:
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject or value.dtype.fields is not None:
            raise ConfigError(f"array {name!r} has dtype {value.dtype}, which cannot be stored without pickle",
                              fix="store a plain numeric array", tensor=name)
        return "numpy", value.dtype.str, tuple(map(int, value.shape)), int(value.nbytes)
    if type(value).__name__ == "DTensor":
        raise ConfigError(f"{name!r} is a DTensor; Checkpointer stores local tensors", tensor=name,
                          fix="save sharded state with dcp.save/dcp.async_save (DCPWriter, CheckpointStager), "
                              "or save t.to_local() per rank into the rank's own folder")
    if type(value).__name__ == "ShardedTensor":
        raise ConfigError(f"{name!r} is a ShardedTensor (deprecated by torch); feedline stores local tensors "
                          "and DTensors", tensor=name, fix="shard with DTensor, or use DCP's default stager")
    odd = _not_dense(value)
    if odd:
        raise ConfigError(f"tensor {name!r} is {odd}; Checkpointer stores dense tensors with their bytes",
                          fix="save t.to_dense() (sparse), t.dequantize() (quantized), t.unbind() (nested), "
                              "or leave meta tensors out of the state", tensor=name)
    dtype = value.dtype
    dname = _DTYPE_NAMES.get(dtype)
    if dname is None:
        dname = _DTYPE_NAMES.setdefault(dtype, str(dtype).removeprefix("torch."))
    if dname.startswith(("qint", "quint")):  # a raw view as a quantized dtype, with no scale: load refuses it
        raise ConfigError(f"tensor {name!r} has the quantized dtype {dname} but no quantization parameters "
                          "(a .view() of raw bytes); a checkpoint of it would not load", tensor=name,
                          fix="save the raw bytes (t.view(torch.uint8)) or the quantized tensor's "
                              "dequantize()")
    return "torch", dname, tuple(value.shape), value.numel() * value.element_size()  # torch.Size holds ints


_DTYPE_NAMES: dict[Any, str] = {}  # torch.dtype -> its name in the header ("float32"): one str() per dtype
_PLAIN: dict[type, Any] = {}  # tensor class -> torch.strided, for classes seen with plain dense tensors


def _not_dense(t: Any) -> str:
    """Why torch tensor ``t`` has no plain strided bytes to store ("" when it has)."""
    strided = _PLAIN.get(type(t))  # the common case in four attribute reads (10**5 tensors per save)
    if strided is not None and t.layout is strided and not (t.is_meta or t.is_quantized or t.is_nested):
        return ""
    why = why_not_dense(t)
    if not why:
        _PLAIN[type(t)] = t.layout
    return why


def _store_instead(value: Any) -> str:
    """What to save in place of ``value``, which cannot be stored (the ``fix`` of the ConfigError)."""
    name = type(value).__name__
    if callable(getattr(value, "state_dict", None)):  # a module, optimizer, scheduler, GradScaler, Loader
        return f"save its state_dict() instead of the {name} (restore it with load_state_dict())"
    if callable(getattr(value, "get_state", None)):  # torch.Generator
        return f"save {name}.get_state() (and restore it with set_state())"
    if hasattr(value, "bit_generator"):  # numpy.random.Generator
        return "save rng.bit_generator.state (a dict; restore with rng.bit_generator.state = saved)"
    if isinstance(value, (set, frozenset)):
        return "save sorted(the_set) (a list)"
    if type(value).__module__.startswith("torch") and name in ("dtype", "device", "layout", "memory_format"):
        return f"save str(value) ({str(value)!r}) and parse it back"
    return "convert it to a tensor, a numpy array or plain values (numbers, strings, lists, dicts)"


def make_layout(state: Any) -> Layout:
    """Split ``state`` into skeleton and leaves and place each leaf (:func:`place`).

    Raises:
        ConfigError: a value is neither a tensor, an array nor a plain value,
            a tensor has no dense bytes, or the state contains itself or is
            nested deeper than :data:`MAX_DEPTH` (the message names the path).
    """
    leaves: list[Any] = []
    entries: list[TensorEntry] = []
    first: list[int] = []
    seen: dict[tuple[Any, ...], int] = {}  # the bytes a leaf shows -> the first leaf showing them
    offset = 0

    def leaf(value: Any, name: str) -> dict[str, int]:
        nonlocal offset
        kind, dtype, shape, nbytes = _leaf_meta(value, name)
        same = seen.setdefault(_showing(value, kind, dtype, shape), len(leaves)) if nbytes else len(leaves)
        if same != len(leaves):  # tied weights, a module shared by two models: one payload
            entries.append(replace(entries[same], name=name))
        else:
            start = place(offset, nbytes)
            entries.append(TensorEntry(name, kind, dtype, shape, start, nbytes))
            offset = start + nbytes
        first.append(same)
        leaves.append(value)
        return {"__tensor__": len(leaves) - 1}

    open_: set[int] = set()  # ids of the containers being encoded (a cycle comes back to one)

    def enc(value: Any, path: str) -> Any:
        if isinstance(value, np.generic):  # first: np.float64 is a float, np.str_ a str
            return {"__scalar__": value.dtype.str, "value": enc(value.item(), path)}
        if value is None or isinstance(value, (bool, int, str)):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else {"__scalar__": "float", "value": repr(float(value))}
        if isinstance(value, np.ndarray) or _is_torch_tensor(value):
            return leaf(value, path or "<root>")
        if isinstance(value, (bytes, bytearray)):
            return {"__bytes__": base64.b64encode(bytes(value)).decode("ascii")}
        if not isinstance(value, (dict, list, tuple)):
            raise ConfigError(f"cannot store {type(value).__name__} at {path or '<root>'!r} without pickle",
                              fix=_store_instead(value), tensor=path or "<root>")
        if id(value) in open_:
            raise ConfigError(f"the state contains itself at {path or '<root>'!r}", tensor=path or "<root>",
                              fix="save a state without cycles (a checkpoint stores a tree)")
        if len(open_) >= MAX_DEPTH:
            raise ConfigError(f"the state is nested more than {MAX_DEPTH} containers deep at {path[:200]!r}",
                              tensor=path[:200], fix="flatten it (e.g. a dict of lists) before saving")
        open_.add(id(value))
        try:
            return container(value, path)
        finally:
            open_.discard(id(value))

    def container(value: Any, path: str) -> Any:
        if isinstance(value, dict):
            if all(type(k) is str and not k.startswith("__") for k in value):
                return {k: enc(v, f"{path}/{k}" if path else k) for k, v in value.items()}
            return {"__dict__": [[enc(k, path), enc(v, f"{path}/{k}" if path else str(k))] for k, v in value.items()]}
        if isinstance(value, tuple):
            return {"__tuple__": [enc(v, f"{path}/{i}") for i, v in enumerate(value)]}
        return [enc(v, f"{path}/{i}") for i, v in enumerate(value)]

    skeleton = enc(state, "")
    return Layout(skeleton, tuple(leaves), tuple(entries), offset, tuple(first))


def _showing(value: Any, kind: str, dtype: str, shape: tuple[int, ...]) -> tuple[Any, ...]:
    """What identifies the bytes a leaf shows: its first element's address, strides, dtype, shape, device.

    Equal for the same tensor reached twice (``lm_head.weight`` tied to the embedding: ``state_dict()``
    lists both) and for two identical views; overlapping but different views differ, and each is stored.
    A lazy conjugate or negative view (``x.conj()``) shows other values from the same memory: its bits
    are part of the key (without them ``x.conj()`` beside ``x`` loaded as ``x``).
    """
    if kind == "numpy":
        return ("numpy", value.__array_interface__["data"][0], value.strides, dtype, shape)
    return (str(value.device), value.data_ptr(), value.stride(), dtype, shape, value.is_conj(), value.is_neg())


def leaf_index(skeleton: dict[str, Any], count: int) -> int:
    """The leaf index a ``{"__tensor__": i}`` node names; ``ValueError`` unless ``0 <= i < count``
    (a hostile ``-1`` or ``true`` would otherwise pick another tensor)."""
    i = skeleton["__tensor__"]
    if type(i) is not int or not 0 <= i < count:
        raise ValueError(f"tensor index {i!r} is not one of the header's {count} tensors")
    return i


def rebuild(skeleton: Any, leaves: list[Any]) -> Any:
    """The state a skeleton describes, with ``leaves[i]`` where ``{"__tensor__": i}`` was.

    Raises:
        ValueError, TypeError, KeyError, OverflowError: a skeleton that no save
            writes (the loader turns them into a ``FormatError``).
    """
    if isinstance(skeleton, list):
        return [rebuild(v, leaves) for v in skeleton]
    if not isinstance(skeleton, dict):
        return skeleton
    if "__tensor__" in skeleton:
        return leaves[leaf_index(skeleton, len(leaves))]
    if "__dict__" in skeleton:
        return {rebuild(k, leaves): rebuild(v, leaves) for k, v in skeleton["__dict__"]}
    if "__tuple__" in skeleton:
        return tuple(rebuild(v, leaves) for v in skeleton["__tuple__"])
    if "__bytes__" in skeleton:
        return base64.b64decode(skeleton["__bytes__"], validate=True)
    if "__scalar__" in skeleton:
        if skeleton["__scalar__"] == "float":
            return float(skeleton["value"])
        dtype = np.dtype(skeleton["__scalar__"])
        if dtype.hasobject or dtype.fields is not None:
            raise ValueError(f"scalar dtype {dtype} is not one a save writes")
        return dtype.type(rebuild(skeleton["value"], leaves))
    return {k: rebuild(v, leaves) for k, v in skeleton.items()}


def iter_leaf_paths(skeleton: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], int]]:
    """``(key path, leaf index)`` of every tensor in a skeleton, keys as in the rebuilt state."""
    if isinstance(skeleton, list):
        for i, v in enumerate(skeleton):
            yield from iter_leaf_paths(v, (*path, i))
    elif isinstance(skeleton, dict):
        if "__tensor__" in skeleton:
            yield path, skeleton["__tensor__"]  # checked by rebuild/leaf_index before it is used
        elif "__dict__" in skeleton:
            for k, v in skeleton["__dict__"]:
                yield from iter_leaf_paths(v, (*path, rebuild(k, [])))
        elif "__tuple__" in skeleton:
            for i, v in enumerate(skeleton["__tuple__"]):
                yield from iter_leaf_paths(v, (*path, i))
        elif not any(m in skeleton for m in _MARKERS):
            for k, v in skeleton.items():
                yield from iter_leaf_paths(v, (*path, k))


def header_json(layout: Layout, checksums: list[int], *, step: int, data_name: str) -> dict[str, Any]:
    """The header (manifest) of a written checkpoint."""
    entries = [replace(e, checksum=c).to_json() for e, c in zip(layout.entries, checksums, strict=True)]
    return {"format": FORMAT, "version": VERSION, "step": step, "data": data_name,
            "data_bytes": layout.data_bytes, "checksum": "xxh3", "tensors": entries, "state": layout.skeleton}


@dataclass(frozen=True, slots=True)
class Header:
    """A parsed, validated header."""

    step: int
    data: str
    data_bytes: int
    entries: tuple[TensorEntry, ...]
    skeleton: Any


def parse_header(doc: Any, *, path: str) -> Header:
    """Validate a header document; any inconsistency is a :class:`FormatError` naming ``path``."""
    fix = "this checkpoint is damaged; load an older step"
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise FormatError("not a feedline checkpoint header", path=path, fix=fix)
    if doc.get("version") not in READ_VERSIONS:
        raise FormatError(f"checkpoint format version {doc.get('version')!r} is not one of {READ_VERSIONS}", path=path,
                          fix="load it with the feedline version that wrote it")
    try:
        entries = tuple(
            TensorEntry(str(t["name"]), str(t["kind"]), str(t["dtype"]), tuple(int(d) for d in t["shape"]),
                        int(t["offset"]), int(t["nbytes"]), int(t["xxh3"], 16))
            for t in doc["tensors"])
        header = Header(int(doc["step"]), str(doc["data"]), int(doc["data_bytes"]), entries, doc["state"])
    except (KeyError, TypeError, ValueError) as e:
        raise FormatError(f"checkpoint header is malformed ({type(e).__name__}: {e})", path=path, fix=fix) from e
    if not 0 <= header.data_bytes < 2**62:
        raise FormatError(f"data_bytes {header.data_bytes:.3g} is not a file size", path=path, fix=fix)
    align = PAGE if doc["version"] == 1 else SMALL_ALIGN  # version 1 put every payload on a page
    for t in entries:
        if t.kind not in ("torch", "numpy") or t.offset < 0 or t.offset % align or t.nbytes < 0 \
                or t.offset + t.nbytes > header.data_bytes or min(t.shape, default=0) < 0:
            raise FormatError(f"tensor {t.name!r} has an impossible place in the header", path=path,
                              tensor=t.name, fix=fix)
    _check_disjoint(entries, path=path, fix=fix)
    if not header.data or any(c in header.data for c in "/\\\0") or header.data.startswith("."):
        raise FormatError(f"data file name {header.data!r} is not a plain file name", path=path, fix=fix)
    return header


def _check_disjoint(entries: tuple[TensorEntry, ...], *, path: str, fix: str) -> None:
    """A :class:`FormatError` unless every two payloads are disjoint or the same tensor.

    A save writes one payload per tensor and names it again, with the same kind, dtype and
    shape, for a tensor reached twice (tied weights). Any other overlap (a payload inside
    another, or the same bytes as another dtype) is a hand-made header: loaded, the two
    tensors would share memory, and an in-place update of one (an optimizer step) would
    silently change the other (before: loaded so, checksums and all).
    """
    last: TensorEntry | None = None  # the payload reaching furthest so far, in offset order
    for t in sorted((t for t in entries if t.nbytes), key=lambda t: (t.offset, -t.nbytes)):
        if last is not None and t.offset < last.offset + last.nbytes:
            same = (t.offset, t.nbytes, t.kind, t.dtype, t.shape) == \
                (last.offset, last.nbytes, last.kind, last.dtype, last.shape)
            if not same:
                raise FormatError(f"tensor {t.name!r} overlaps the bytes of tensor {last.name!r} in the header "
                                  "(only one tensor saved twice shares its bytes)", path=path,
                                  tensor=t.name, fix=fix)
            continue
        last = t
