"""Load a committed checkpoint: read the data file once, verify every tensor, rebuild.

No pickle is involved: the header is JSON, tensors are views of the bytes read
(into a 4096-aligned buffer; every payload starts on a multiple of 64, so every
dtype view is aligned). A tensor whose bytes are
missing (truncated file) or differ from the recorded xxh3 is named in the
error. With ``into=``, tensors are copied in place into the matching tensors
of an existing state (a model's ``state_dict()`` shares its parameters, so the
model is updated); a shape or dtype mismatch names the tensor.
"""

from __future__ import annotations

import errno
import numbers
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from feedline.checkpoint._layout import Header, TensorEntry, iter_leaf_paths, place, rebuild
from feedline.checkpoint._staging import bytes_view, copyable
from feedline.checkpoint._store import committed_steps, header_path, read_header
from feedline.errors import ArgumentError, ChecksumError, FormatError, ReadError, StateError
from feedline.format._files import open_fd, path_argument
from feedline.io._buffers import aligned_empty
from feedline.io._posix import pread_into

LATEST_RETRIES = 5  # load(step=None) takes the new latest when the one it listed was rotated away
_DAMAGED = "this checkpoint is damaged; load an older step (Checkpointer.load(step=...))"


def read_data(directory: Path, header: Header, *, verify: bool = True) -> np.ndarray:
    """The data file's bytes in one aligned buffer, each tensor's checksum verified.

    Raises:
        FormatError: the file is shorter than the header says (names the first cut tensor).
        ChecksumError: a tensor's bytes differ from its checksum (names it).
    """
    path = str(directory / header.data)
    try:
        fd = open_fd(path)
    except OSError as e:
        raise ReadError(f"cannot open checkpoint data: {e.strerror}", path=path, fix=_DAMAGED) from e
    end = max((t.offset + t.nbytes for t in header.entries), default=0)  # <= data_bytes (parse_header)
    try:
        size = os.fstat(fd).st_size
        if size < header.data_bytes:
            cut = next((t for t in header.entries if t.offset + t.nbytes > size), None)
            what = f"tensor {cut.name!r} is cut" if cut else "every tensor is whole, the file is not"
            raise FormatError(f"checkpoint data is truncated: {size} of {header.data_bytes} bytes; {what}",
                              path=path, tensor=cut.name if cut else None, fix=_DAMAGED)
        buf = aligned_empty(end)  # only the bytes tensors use: a padded data_bytes is never allocated
        got = pread_into(fd, 0, buf)
        _check_still_named(fd, path)
    except OSError as e:
        raise ReadError(f"cannot read checkpoint data: {e.strerror}", path=path, fix=_DAMAGED) from e
    finally:
        os.close(fd)
    if got < end:
        raise FormatError(f"short read of checkpoint data ({got} of {end})", path=path, fix=_DAMAGED)
    if verify:
        for entry in header.entries:
            _verify(buf, entry, path)
    return buf


def _check_still_named(fd: int, path: str) -> None:
    """The bytes just read are the checkpoint's: its name still leads to the file read.

    keep= rotation renames a rotated checkpoint's data file for the next save to
    write over (``_store.RECYCLE_NAME``): a file renamed after this check was
    read whole before any overwrite could start.

    Raises:
        FileNotFoundError: the name is gone or leads elsewhere (``_read`` says it was rotated away).
    """
    st = os.fstat(fd)
    try:
        now = os.stat(path)
    except FileNotFoundError:
        now = None
    if now is None or (now.st_ino, now.st_dev) != (st.st_ino, st.st_dev):
        raise FileNotFoundError(errno.ENOENT, "the data file was moved away while it was read", path)


def _verify(buf: np.ndarray, e: TensorEntry, path: str) -> None:
    actual = xxhash.xxh3_64_intdigest(buf[e.offset : e.offset + e.nbytes].data)
    if actual != e.checksum:
        raise ChecksumError(f"tensor {e.name!r} is damaged: xxh3 {actual:016x}, header says {e.checksum:016x}",
                            path=path, tensor=e.name, fix=_DAMAGED)


def load(directory: str | os.PathLike[str], step: int | None = None, *, into: Any = None,
         verify: bool = True, strict: bool = True, copy: bool = False) -> Any:
    """Load step ``step`` (default: the latest committed) from ``directory``.

    Args:
        into: an existing state (e.g. ``{"model": model.state_dict(), ...}``);
            tensors and arrays found at the same path are overwritten in place
            and returned; everything else comes from the checkpoint. Every
            pair is checked before the first copy: on any error ``into`` is
            left as it was.
        verify: check every tensor's checksum (on by default).
        strict: with ``into=``, every tensor of ``into`` must have a tensor at
            the same path in the checkpoint (as ``load_state_dict(strict=True)``
            asks of a model); ``False`` leaves those that have none as they are.
        copy: the tensors returned (those not copied into ``into``) share one
            buffer, the whole data file as read, which stays in memory while
            any of them lives: an optimizer's state after
            ``opt.load_state_dict()`` on CPU (it keeps tensors already of the
            right device and dtype) holds the bytes of the model loaded
            ``into=`` too. ``copy=True`` moves them into a buffer of their own
            size before returning (one more memcpy of them; for a moment both
            buffers exist), so the read buffer is freed.

    With ``step=None`` a checkpoint rotated away by a writer in another
    process (``keep=``) while it was being read is passed over for the new
    latest, so a reader beside a training job does not fail on the race.

    Raises:
        ArgumentError: ``directory`` is not a path, ``step`` not an int, ``verify``/``strict``/``copy``
            not a bool (also ``TypeError``s).
        ReadError: no checkpoint (or no such step).
        FormatError, ChecksumError: the checkpoint is damaged (names the tensor).
        StateError: a tensor's kind, shape or dtype differs from ``into``'s, a
            tensor of ``into`` is on the ``meta`` device, or (``strict``) has no
            counterpart in the checkpoint (names it).
    """
    d = Path(path_argument(directory, "directory"))
    for name, flag in (("verify", verify), ("strict", strict), ("copy", copy)):
        if not isinstance(flag, (bool, np.bool_)):  # strict="no" was strict, strict=None was not
            raise ArgumentError(f"{name} must be True or False, got {type(flag).__name__} {flag!r}", field=name,
                                fix=f"pass {name}=True or {name}=False")
    if step is not None and (not isinstance(step, numbers.Integral) or isinstance(step, (bool, np.bool_))):
        raise ArgumentError(f"step must be an int or None, got {type(step).__name__} {step!r}", field="step",
                            fix="pass a step from Checkpointer.steps(), or None for the latest")
    if step is not None:
        header, buf = _read(d, int(step), verify)  # a numpy integer names the same file
    else:
        for attempt in range(LATEST_RETRIES + 1):
            steps = committed_steps(d)
            if not steps:
                raise ReadError(f"no committed checkpoint in {d}", path=str(d), fix="save one first")
            try:
                header, buf = _read(d, steps[-1], verify)
                break
            except ReadError:
                # a Checkpointer in another process rotated it away (keep=) between the listing and
                # the read: the latest is a newer step now (before: ReadError in ~0.1% of loads
                # racing saves every few ms)
                if attempt == LATEST_RETRIES or header_path(d, steps[-1]).exists():
                    raise
    leaves = []
    made: dict[tuple[Any, ...], Any] = {}  # a tensor saved once for two entries (tied weights) loads as one
    for entry in header.entries:
        try:
            key = (entry.offset, entry.nbytes, entry.kind, entry.dtype, entry.shape)
            if key not in made or not entry.nbytes:  # zero-size tensors are never shared (as on save)
                made[key] = bytes_view(buf, entry)
            leaves.append(made[key])
        except (ValueError, TypeError, RuntimeError) as e:
            raise FormatError(f"tensor {entry.name!r}: dtype {entry.dtype!r}, shape {list(entry.shape)} and "
                              f"{entry.nbytes} bytes do not fit ({e})", path=str(d), tensor=entry.name,
                              fix=_DAMAGED) from e
    try:
        state = rebuild(header.skeleton, leaves)  # first: every tensor index checked before into= uses one
        views = list(leaves)
        if into is not None:
            _copy_into(header, leaves, into, strict=strict)
            state = rebuild(header.skeleton, leaves)
        if copy:
            _own(header, buf, leaves, [i for i, leaf in enumerate(leaves) if leaf is views[i]])
            state = rebuild(header.skeleton, leaves)
        return state
    except (IndexError, KeyError, TypeError, ValueError, AttributeError, OverflowError, RecursionError) as e:
        if isinstance(e, StateError):
            raise
        raise FormatError(f"checkpoint header's state is malformed ({type(e).__name__}: {str(e)[:200]})",
                          path=str(d), fix=_DAMAGED) from e


def _read(d: Path, step: int, verify: bool) -> tuple[Header, np.ndarray]:
    header = read_header(d, step, verify=verify)
    try:
        return header, read_data(d, header, verify=verify)
    except ReadError as e:
        if header_path(d, step).exists():
            raise
        # keep= rotation removes the header, then the data: the data went between our two opens (before:
        # "cannot open checkpoint data ... this checkpoint is damaged" for a checkpoint that was fine)
        have = committed_steps(d)
        raise ReadError(f"step {step} was removed from {d} while it was being loaded (keep= rotation by the "
                        "Checkpointer saving into this folder)", path=str(d),
                        fix=f"load one of the committed steps {have[-5:]}, or save with a larger keep=") from e


def _own(header: Header, buf: np.ndarray, leaves: list[Any], keep: list[int]) -> None:
    """Move ``leaves[i]`` for ``i`` in ``keep`` (views of ``buf``) into one new buffer of their size."""
    places: dict[int, int] = {}  # id of a leaf -> its place in the new buffer (a shared leaf moves once)
    end = 0
    for i in keep:
        if id(leaves[i]) not in places:
            places[id(leaves[i])] = start = place(end, header.entries[i].nbytes)
            end = start + header.entries[i].nbytes
    own = aligned_empty(end)
    moved: dict[int, Any] = {}
    for i in keep:
        old, entry = leaves[i], header.entries[i]
        if id(old) not in moved:
            start = places[id(old)]
            own[start : start + entry.nbytes] = buf[entry.offset : entry.offset + entry.nbytes]
            moved[id(old)] = bytes_view(own, replace(entry, offset=start))
        leaves[i] = moved[id(old)]


def _copy_into(header: Header, leaves: list[Any], into: Any, *, strict: bool) -> None:
    """Copy the checkpoint's tensors into ``into``'s, in place; every pair is checked before the
    first copy, so a mismatch leaves ``into`` untouched (before: the tensors ahead of it were
    already overwritten, a half-loaded model)."""
    pairs = []
    found: set[tuple[Any, ...]] = set()
    unmatched: list[tuple[Any, ...]] = []  # checkpoint tensors with no counterpart in ``into``
    for path, i in iter_leaf_paths(header.skeleton):
        target = _lookup(into, path)
        if target is None:
            unmatched.append(path)
            continue
        found.add(path)
        _check_target(header.entries[i], target)
        pairs.append((i, target))
    if strict:
        missing = [p for p in _tensor_paths(into) if p not in found]
        if missing:
            names = ", ".join(repr("/".join(map(str, p))) for p in missing[:5])
            more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            renamed = key_renaming(missing, unmatched)
            if renamed is not None:
                raise StateError(f"{len(missing)} tensor(s) of the state loaded into are not in the checkpoint "
                                 f"under their names ({names}{more}): {renamed[0]}; nothing was loaded",
                                 tensor="/".join(map(str, missing[0])), fix=renamed[1])
            raise StateError(f"{len(missing)} tensor(s) of the state loaded into are not in the checkpoint: "
                             f"{names}{more}; nothing was loaded", tensor="/".join(map(str, missing[0])),
                             fix="load(..., strict=False) loads the tensors both have and leaves these as "
                                 "they are; or compare with load() without into= (another model "
                                 "configuration, or a key under another name)")
    for i, target in pairs:
        src, entry = leaves[i], header.entries[i]
        try:
            if isinstance(target, np.ndarray):
                np.copyto(target, src)
            else:
                with _no_grad():  # a Parameter (requires_grad) is a valid target
                    copyable(target).copy_(copyable(src))
        except (ValueError, RuntimeError, TypeError) as e:  # a read-only array, an inference tensor...
            raise StateError(f"tensor {entry.name!r} cannot be overwritten in the state loaded into "
                             f"({type(e).__name__}: {str(e)[:160]})", tensor=entry.name,
                             fix="pass writable tensors, or load without into=") from e
        leaves[i] = target


def key_renaming(missing: list[tuple[Any, ...]], unmatched: list[tuple[Any, ...]]) -> tuple[str, str] | None:
    """Why ``missing`` (paths of ``into``) are absent when one dotted key segment explains it, and the fix.

    Wrappers rename a model's ``state_dict()`` keys: ``DistributedDataParallel``
    and ``DataParallel`` prefix every key with ``module.``, ``torch.compile``
    with ``_orig_mod.`` (inside the key for a compiled submodule:
    ``encoder._orig_mod.0.weight``). When ``unmatched`` (the checkpoint's
    paths ``into`` lacks) are ``missing`` with one such run of segments added
    (saved wrapped, loaded unwrapped) or removed (the reverse) for every one
    of ``missing``, returns (the reason, the fix); else ``None`` (another
    model structure: ``0.weight`` missing beside a checkpoint's ``weight`` is
    not a renaming when ``1.weight`` is missing too).
    """
    by_parent: dict[tuple[Any, ...], set[str]] = {}
    for q in unmatched:
        if q and isinstance(q[-1], str):
            by_parent.setdefault(q[:-1], set()).add(q[-1])
    for path in missing[:8]:  # the segment is found from one pair, then checked on every missing path
        if not path or not isinstance(path[-1], str):
            continue
        key: str = path[-1]
        for name in sorted(by_parent.get(path[:-1], ()))[:1000]:
            for in_checkpoint, seg in ((True, _inserted(name, key)), (False, _inserted(key, name))):
                if seg is not None and _explained(missing, by_parent, seg, in_checkpoint) == len(missing):
                    return _renaming_advice(seg, in_checkpoint, "/".join(map(str, (*path[:-1], name))),
                                            (name if in_checkpoint else key).startswith(seg))
    return None


def _without(key: str, seg: str) -> str:
    """``key`` with the dotted run ``seg`` removed once at a segment boundary."""
    return ("." + key).replace("." + seg, ".", 1)[1:]


def _explained(missing: list[tuple[Any, ...]], by_parent: dict[tuple[Any, ...], set[str]], seg: str,
               in_checkpoint: bool) -> int:
    """How many ``missing`` paths the checkpoint has with ``seg`` added (``in_checkpoint``) or removed."""
    stripped = {parent: {_without(n, seg) for n in names} for parent, names in by_parent.items()}
    n = 0
    for m in missing:
        if m and isinstance(m[-1], str):
            n += (m[-1] in stripped.get(m[:-1], ())) if in_checkpoint else (_without(m[-1], seg) in
                                                                             by_parent.get(m[:-1], ()))
    return n


def _renaming_advice(seg: str, in_checkpoint: bool, example: str, prefix: bool) -> tuple[str, str]:
    wrapper = {"module.": " (as DistributedDataParallel and DataParallel name a model's keys)",
               "_orig_mod.": " (as a torch.compile'd model names its keys)"}.get(seg, "")
    where = "prefix" if prefix else "segment"
    if prefix:
        rename = f"torch.nn.modules.utils.consume_prefix_in_state_dict_if_present(sd, {seg!r})"
    else:
        rename = f"sd = {{k.replace({seg!r}, '', 1): v for k, v in sd.items()}}"
    if in_checkpoint:
        why = (f"the checkpoint's keys have the {where} {seg!r}{wrapper}, which the state loaded into lacks "
               f"(the checkpoint has {example!r})")
        unwrapped = {"module.": "model.module.state_dict()", "_orig_mod.": "model._orig_mod.state_dict()"}
        save = f"save {unwrapped[seg]} from now on, and " if prefix and seg in unwrapped else ""
        return why, (f"{save}load this one without into= and rename its keys before model.load_state_dict(): "
                     f"sd = load(dir)[...]; {rename}")
    why = (f"the state loaded into has keys with the {where} {seg!r}{wrapper}, which the checkpoint lacks "
           f"(it has {example!r})")
    return why, ("load into the unwrapped model's state_dict() (model.module or model._orig_mod), or load "
                 f"without into=, add {seg!r} to the keys and call model.load_state_dict()")


def _inserted(longer: str, shorter: str) -> str | None:
    """The dotted segments ``longer`` has beyond ``shorter`` when they are one contiguous run
    (``_inserted("module.fc.weight", "fc.weight") == "module."``), else None."""
    lp, sp = longer.split("."), shorter.split(".")
    k = len(lp) - len(sp)
    if k <= 0:
        return None
    for i in range(len(sp) + 1):
        if lp[:i] == sp[:i] and lp[i + k :] == sp[i:]:
            return ".".join(lp[i : i + k]) + "."
        if i < len(sp) and lp[i] != sp[i]:
            break
    return None


def _check_target(entry: TensorEntry, target: Any) -> None:
    """A :class:`StateError` naming ``entry`` unless ``target`` can take its bytes as they are."""
    if isinstance(target, np.ndarray) != (entry.kind == "numpy"):
        have = "a numpy array" if isinstance(target, np.ndarray) else "a torch tensor"
        was = "a numpy array" if entry.kind == "numpy" else "a torch tensor"
        raise StateError(f"tensor {entry.name!r} is {was} in the checkpoint but {have} in the state loaded into",
                         tensor=entry.name, fix="load without into= and convert, or pass a state of the same kinds")
    if not isinstance(target, np.ndarray) and target.device.type == "meta":
        raise StateError(f"tensor {entry.name!r} is on the meta device in the state loaded into: it has no "
                         "memory to load into",
                         tensor=entry.name, fix="materialise the model first (model.to_empty(device='cpu')), "
                         "or load without into= and call model.load_state_dict(state[...], assign=True)")
    if tuple(target.shape) != entry.shape:
        raise StateError(f"tensor {entry.name!r} has shape {list(entry.shape)} in the checkpoint but "
                         f"{list(target.shape)} in the state loaded into", tensor=entry.name,
                         fix="build the model with the configuration it was saved with")
    have_dtype = (np.dtype(target.dtype).str if isinstance(target, np.ndarray)
                  else str(target.dtype).removeprefix("torch."))
    if have_dtype != entry.dtype:
        fix = "load without into= and pass the tensors to model.load_state_dict(), which casts; or build the model in the saved dtype"
        if not isinstance(target, np.ndarray) and target.dtype == _torch().get_default_dtype():
            fix += f" (torch.get_default_dtype() is {have_dtype} here: was the checkpoint saved under another default?)"
        raise StateError(f"tensor {entry.name!r} is {entry.dtype} in the checkpoint but {have_dtype} in the state "
                         "loaded into", tensor=entry.name, fix=fix)


def _tensor_paths(state: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Key paths of every tensor and array in ``state`` (as :func:`_lookup` takes them)."""
    if isinstance(state, np.ndarray) or hasattr(state, "copy_"):
        return [path]
    if isinstance(state, dict):
        return [p for k, v in state.items() for p in _tensor_paths(v, (*path, k))]
    if isinstance(state, (list, tuple)):
        return [p for i, v in enumerate(state) for p in _tensor_paths(v, (*path, i))]
    return []


def _torch() -> Any:
    import torch

    return torch


def _no_grad() -> Any:
    return _torch().no_grad()


def _lookup(state: Any, path: tuple[Any, ...]) -> Any:
    node = state
    for key in path:
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            return None
    return node if isinstance(node, np.ndarray) or hasattr(node, "copy_") else None
