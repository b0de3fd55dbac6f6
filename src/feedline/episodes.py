"""Recorded episodes (robot demonstrations, driving logs) as training windows.

A robot or driving log is packed one *frame* per sample, keyed
``<episode>/<frame>`` (``episode_0007/000123``: every camera, the lidar sweep and
that frame's row of the joint and action arrays as fields). A policy trains on
*windows*: the last 2 frames of each camera, the joint states beside them and
the next 8 actions (LeRobot's ``delta_timestamps``, ACT's action chunks,
diffusion-policy's ``SequenceSampler``). :class:`Windows` turns the packed frames
into those windows, one per frame, never crossing from one episode into the next::

    from feedline import episodes
    windows = episodes.Windows("data/frames", {"cam_front.jpg": [-1, 0], "joints.npy": [-1, 0],
                                               "actions.npy": range(8)})
    loader = feedline.Loader(windows, batch_size=32, seed=0,
                             collate=episodes.Collate(pad={"lidar.npy": 4096}))
    # batch["cam_front.jpg"]: uint8[32, 2, H, W, 3]; batch["actions.npy"]: float32[32, 8, 7];
    # batch["actions_is_pad"]: bool[32, 8], True where the chunk ran past the episode's end

- An offset that falls outside the episode repeats its first or last frame and is
  flagged in ``<name>_is_pad`` (LeRobot's convention); ``pad="drop"`` instead keeps
  only the frames whose whole window lies inside their episode.
- A frame that lacks a field (a camera that was not recording) gives zeros of the
  field's shape, flagged in ``<name>_is_pad`` as well.
- A field whose frames differ in shape (lidar sweeps of N x 4 points) is a list of
  arrays per window; :class:`Collate` pads such fields into one tensor and a mask.

Windows is a map-style dataset: ``Loader`` shuffles, splits across ranks and
resumes it by window index as it does any other dataset.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from feedline.errors import ConfigError
from feedline.padding import PadCollate, pad_stack

__all__ = ["Collate", "Rows", "Windows", "episode_of", "pack", "pad_stack"]

PAD_MODES = ("edge", "drop")
EPISODES_FILE = "episodes.json"
"""Written by :func:`pack` beside the manifest: per episode, its frame count and its JSON files."""


def episode_of(key: str) -> str:
    """The default episode of a frame: its key up to the last ``/``
    (``episode_0007/000123`` -> ``episode_0007``; a key without ``/`` -> ``""``)."""
    return key.rpartition("/")[0]


def _pad_name(field: str) -> str:
    """``actions.npy`` -> ``actions_is_pad`` (the field's name without its extension)."""
    return field.rsplit(".", 1)[0] + "_is_pad" if "." in field else field + "_is_pad"


def _offsets(field: str, value: Any) -> tuple[tuple[int, ...], bool]:
    """The offsets of ``field`` and whether the field keeps a time axis (a sequence does,
    a single int does not)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return (int(value),), False
    if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, range, np.ndarray)):
        raise ConfigError(f"offsets[{field!r}]: must be an int or a sequence of ints (frames from the "
                          f"window's frame: [-1, 0] the previous and this one, range(8) the next 8), "
                          f"got {value!r}", field="offsets")
    out = tuple(value)
    if not out or not all(isinstance(o, (int, np.integer)) and not isinstance(o, bool) for o in out):
        raise ConfigError(f"offsets[{field!r}]: must be a non-empty sequence of ints, got {value!r}",
                          field="offsets")
    return tuple(int(o) for o in out), True


class Windows:
    """Windows of frames from a packed dataset of episodes: a map-style dataset for ``Loader``.

    Args:
        dataset: a packed dataset (or its folder) holding one sample per frame, the frames of
            an episode consecutive and in time order (``feedline pack`` sorts keys, so name
            frames with zero-padded numbers; ``DatasetWriter`` keeps the order written).
        offsets: field -> frame offsets from the window's frame: ``[-1, 0]`` the previous
            frame and this one, ``range(8)`` this and the next 7 (an action chunk); a single
            int gives the field without a time axis. Only these fields are decoded.
        episode: key -> episode id; by default the key up to its last ``/``.
        pad: ``"edge"`` (default): every frame starts a window; an offset outside the episode
            repeats its first or last frame, flagged in ``<name>_is_pad``. ``"drop"``: only
            the frames whose whole window lies inside their episode.
        decode: field -> decoder, as ``Loader(decode=...)`` takes it.

    Each window is a dict: every field of ``offsets`` as an array ``[len(offsets), ...]``
    (a list of arrays when its frames differ in shape), ``<name>_is_pad`` for every field
    (``bool[len(offsets)]``: True where the frame was repeated or the field missing),
    ``"episode"`` (the episode's number, in dataset order) and ``"frame"`` (the frame's
    number within it).

    Raises:
        ConfigError: an unknown field, bad offsets or ``pad``, an episode whose frames are
            not consecutive, or no window at all.
    """

    def __init__(self, dataset: Any, offsets: Mapping[str, Sequence[int] | int], *,
                 episode: Callable[[str], str] = episode_of, pad: str = "edge",
                 decode: Mapping[str, Any] | None = None) -> None:
        if isinstance(dataset, (str, os.PathLike)):
            from feedline.io import open_dataset

            dataset = open_dataset(dataset)
        if not callable(getattr(dataset, "read_many", None)) or not callable(getattr(dataset, "keys", None)):
            raise ConfigError(f"dataset: must be a packed dataset or its folder, got {type(dataset).__name__}",
                              field="dataset", fix="pack the frames first (feedline.DatasetWriter, one "
                              "sample per frame keyed <episode>/<frame>)")
        if pad not in PAD_MODES:
            raise ConfigError(f"pad: must be one of {', '.join(PAD_MODES)}, got {pad!r}", field="pad")
        if not isinstance(offsets, Mapping) or not offsets:
            raise ConfigError(f"offsets: must be a non-empty dict of field -> frame offsets, got {offsets!r}",
                              field="offsets", fix="e.g. {'cam_front.jpg': [-1, 0], 'actions.npy': range(8)}")
        fields = list(getattr(dataset, "fields", []))
        unknown = [f for f in offsets if f not in fields]
        if unknown:
            raise ConfigError(f"offsets: field(s) {', '.join(map(repr, unknown))} are not in the dataset, "
                              f"whose fields are {', '.join(map(repr, fields))}", field="offsets")
        self.dataset = dataset
        self.pad = pad
        self.offsets = {f: _offsets(f, v) for f, v in offsets.items()}
        from feedline.decode import as_decoders

        self._decoders = as_decoders(dict(decode) if decode else None)
        raw = [f for f in self.offsets if not self._decoders.decodes(f)]
        if raw:
            raise ConfigError(f"offsets: field(s) {', '.join(map(repr, raw))} have no decoder (an extension "
                              "feedline does not know arrives as bytes)", field="offsets",
                              fix=f"decode them: decode={{{raw[0]!r}: episodes.Rows('<f4', 4)}} for float32 "
                              "rows of 4, or pack raw sensor files as arrays (feedline pack --key episode --raw "
                              "lidar:f4:4)")
        self.episodes = self._episodes(dataset.keys(), episode)
        self._anchors = self._windows()
        if not len(self._anchors):
            raise ConfigError(f"no window fits: every episode is shorter than the offsets span "
                              f"({self._span()} frames) with pad='drop'", field="pad",
                              fix="pad='edge' keeps every frame, flagging the frames repeated")
        self._blank: dict[str, np.ndarray] = {}
        self.meta = self._read_meta()

    def _read_meta(self) -> dict[str, Any]:
        """``episodes.json`` beside the manifest (written by :func:`pack`): episode name -> its
        frame count and JSON files; empty without one."""
        root = getattr(self.dataset, "root", None)
        path = Path(str(root)) / EPISODES_FILE if root is not None else None
        if path is None or not path.is_file():
            return {}
        with open(path, encoding="utf-8") as f:
            loaded: dict[str, Any] = json.load(f)
        return loaded

    @staticmethod
    def _episodes(keys: Sequence[str], episode: Callable[[str], str]) -> list[tuple[str, int, int]]:
        """(episode id, first index, end index) per episode, in dataset order."""
        out: list[tuple[str, int, int]] = []
        seen: dict[str, int] = {}
        for i, key in enumerate(keys):
            name = episode(key)
            if out and out[-1][0] == name:
                continue
            if name in seen:
                raise ConfigError(f"episode {name!r}: its frames are not consecutive in the dataset (frame "
                                  f"{key!r} at index {i} comes after episode {out[-1][0]!r})", field="dataset",
                                  fix="write each episode's frames together, in time order; or give "
                                  "episode= a function of the key that names the episode")
            if out:
                out[-1] = (out[-1][0], out[-1][1], i)
            seen[name] = i
            out.append((name, i, i))
        if out:
            out[-1] = (out[-1][0], out[-1][1], len(keys))
        return out

    def _span(self) -> int:
        every = [o for offs, _ in self.offsets.values() for o in offs]
        return max(every) - min(every) + 1

    def _windows(self) -> np.ndarray:
        """(episode number, frame number) of each window."""
        every = [o for offs, _ in self.offsets.values() for o in offs]
        lo, hi = min(every), max(every)
        rows: list[tuple[int, int]] = []
        for e, (_, start, end) in enumerate(self.episodes):
            n = end - start
            first, last = (0, n) if self.pad == "edge" else (max(0, -lo), n - max(0, hi))
            rows.extend((e, t) for t in range(first, last))
        return np.asarray(rows, dtype=np.int64).reshape(-1, 2)

    def __len__(self) -> int:
        return len(self._anchors)

    def indices(self, episodes: Sequence[str | int]) -> list[int]:
        """The window indices of ``episodes`` (names, or numbers in dataset order): a split by
        episode, so no validation window shares frames with a training one::

            names = [name for name, _, _ in windows.episodes]
            val = torch.utils.data.Subset(windows, windows.indices(names[-2:]))

        Raises:
            ConfigError: an episode that is not in the dataset.
        """
        by_name = {name: e for e, (name, _, _) in enumerate(self.episodes)}
        wanted = set()
        for ep in episodes:
            e = by_name.get(ep) if isinstance(ep, str) else int(ep)
            if e is None or not 0 <= e < len(self.episodes):
                raise ConfigError(f"episode {ep!r} is not in the dataset ({len(self.episodes)} episodes: "
                                  f"{', '.join(repr(n) for n, _, _ in self.episodes[:3])}, ...)", field="episodes")
            wanted.add(e)
        return np.flatnonzero(np.isin(self._anchors[:, 0], sorted(wanted))).tolist()

    @property
    def fingerprint(self) -> str:
        """Stable id for the loader's resume state: the dataset's, the offsets and the padding."""
        spec = ";".join(f"{f}={','.join(map(str, o))}" for f, (o, _) in sorted(self.offsets.items()))
        return f"windows[{spec};{self.pad};{len(self)}]:{getattr(self.dataset, 'fingerprint', '')}"

    def __getitem__(self, i: int) -> dict[str, Any]:
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"window index must be an int, got {type(i).__name__}")
        e, t = (int(v) for v in self._anchors[i])
        _, start, end = self.episodes[e]
        n = end - start
        wanted = sorted({t, *(min(max(t + o, 0), n - 1) for offs, _ in self.offsets.values() for o in offs)})
        frames = dict(zip(wanted, self.dataset.read_many([start + w for w in wanted]), strict=True))
        out: dict[str, Any] = {"__key__": str(frames[t]["__key__"]) if "__key__" in frames[t] else str(i),
                               "episode": e, "frame": t}
        for field, (offs, timed) in self.offsets.items():
            values: list[Any] = []
            pad = np.zeros(len(offs), dtype=bool)
            for j, o in enumerate(offs):
                w = min(max(t + o, 0), n - 1)
                pad[j] = w != t + o
                data = frames[w].get(field)
                if data is None:
                    pad[j] = True
                    values.append(None)
                else:
                    values.append(self._decoders.decode_field(field, data, key=str(frames[w].get("__key__"))))
            values = self._fill(field, values)
            out[field] = _stack(values) if timed else values[0]
            out[_pad_name(field)] = pad if timed else bool(pad[0])
        return out

    def _fill(self, field: str, values: list[Any]) -> list[Any]:
        """Missing frames of a field as zeros shaped like its frames (learned from the first
        frame of the dataset that holds the field, so every run fills alike)."""
        if all(v is not None for v in values):
            return values
        blank = self._blank.get(field)
        if blank is None:
            blank = self._blank[field] = self._find_blank(field)
        return [np.array(blank) if v is None else v for v in values]

    def _find_blank(self, field: str) -> np.ndarray:
        n = len(self.dataset.keys()) if hasattr(self.dataset, "keys") else 0
        for lo in range(0, n, 64):
            for s in self.dataset.read_many(list(range(lo, min(lo + 64, n)))):
                if s.get(field) is not None:
                    value = np.asarray(self._decoders.decode_field(field, s[field]))
                    return np.zeros_like(value)
        raise ConfigError(f"field {field!r} is in no frame", field="offsets")

    def __repr__(self) -> str:
        return (f"Windows({len(self)} windows of {len(self.episodes)} episodes, "
                f"offsets={ {f: list(o) for f, (o, _) in self.offsets.items()} }, pad={self.pad!r})")


class Rows:
    """A decoder for raw binary rows (``Windows(decode={"lidar.bin": Rows("<f4", 4)})``): the bytes
    as ``dtype`` values, ``columns`` to a row, ``[N, columns]``; picklable for process workers."""

    def __init__(self, dtype: str, columns: int) -> None:
        self.dtype = np.dtype(dtype)
        self.columns = int(columns)

    def __call__(self, data: Any) -> np.ndarray:
        values = np.frombuffer(data, dtype=self.dtype)
        if values.size % self.columns:
            raise ConfigError(f"{values.size} values of {self.dtype} are not rows of {self.columns}",
                              fix="check the dtype and the column count")
        return values.reshape(-1, self.columns)


def _stack(values: list[Any]) -> Any:
    """One array ``[T, ...]`` when every frame has one shape and dtype, else the list."""
    arrays = [np.asarray(v) for v in values]
    if all(a.shape == arrays[0].shape and a.dtype == arrays[0].dtype for a in arrays):
        return np.stack(arrays)
    return arrays


class Collate(PadCollate):
    """A ``Loader(collate=...)`` for windows: stacks every field into a tensor, and pads the
    fields of varying length (point clouds) given in ``pad`` (field -> length to pad or cut
    to, None for the batch's longest) into ``<field>`` plus a ``<name>_mask`` (True where a
    point is real). ``__key__`` and fields of text or dicts stay lists. Runs in the workers;
    picklable. :class:`feedline.padding.PadCollate` with ``mask=True, lengths=False``."""

    def __init__(self, pad: Mapping[str, int | None] | None = None) -> None:
        super().__init__(pad, mask=True, lengths=False)


def _frame_order(stem: str) -> tuple[int, int | str]:
    """Frame names in time order: numbers by value (``2`` before ``10``), others by name."""
    return (0, int(stem)) if stem.isdigit() else (1, stem)


def pack(src: str | os.PathLike[str], out: str | os.PathLike[str], *,
         raw: Mapping[str, tuple[str, int]] | None = None, shard_size: int | str = "1GiB",
         progress: bool = False) -> dict[str, Any]:
    """Pack a folder of recorded episodes, one sample per frame, for :class:`Windows`.

    The layout is the one recorders write (LeRobot's raw logs, ROS bag exports)::

        src/episode_0007/cam_front/000123.jpg   one folder per sensor, one file per frame
        src/episode_0007/lidar/000123.bin
        src/episode_0007/joints.npy              an array with one row per frame (T x 7)
        src/episode_0007/meta.json               anything else about the episode

    Frame ``000123`` of ``episode_0007`` becomes sample ``episode_0007/000123`` with a
    field per sensor (``cam_front.jpg``, ``lidar.bin``) and the frame's row of each
    per-episode array whose first dimension is the episode's frame count
    (``joints.npy``: ``float32[7]``). A frame a sensor lacks is a sample without that
    field (:class:`Windows` fills zeros and flags it). Episodes go in name order and
    frames in number order, so each episode's frames are consecutive.

    Args:
        src: the folder of episode folders (hidden entries skipped).
        out: the dataset folder to write (replaced only once the new one is complete).
        raw: sensor -> ``(dtype, columns)`` for raw binary files: ``{"lidar": ("<f4", 4)}``
            stores each ``lidar/*.bin`` as an ``N x 4`` float32 ``lidar.npy`` (N may vary per
            frame: :class:`Collate` pads it). Without it such files are stored as bytes.
        shard_size: as :class:`feedline.DatasetWriter`'s.
        progress: draw a progress bar on stderr.

    Returns:
        ``{"episodes", "frames", "fields", "skipped"}``: counts, the fields with the number of
        frames holding each, and the files left out with why (an array whose length is not
        the episode's frame count, a file in no sensor folder that is neither ``.npy`` nor
        ``.json``). The episodes' frame counts and their ``.json`` files are written to
        ``out/episodes.json`` (:attr:`Windows.meta` reads it).

    Raises:
        ConfigError: ``src`` holds no episode folder, or ``raw`` names a bad dtype or a file
            whose size is not a whole number of rows.
    """
    from feedline.format import DatasetWriter

    root = Path(src)
    if not root.is_dir():
        raise ConfigError(f"src {str(root)!r} is not a folder", path=str(root))
    rows = {k: (np.dtype(d), int(c)) for k, (d, c) in (raw or {}).items()}
    folders = sorted(d for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    if not folders:
        raise ConfigError(f"src {str(root)!r} holds no episode folder",
                          fix="give the folder holding episode_0000/, episode_0001/, ...")
    fields: dict[str, int] = {}
    skipped: list[str] = []
    meta: dict[str, Any] = {}
    listed = [(ep, _sensor_files(ep)) for ep in folders]
    total = sum(len(stems) for _, (_, stems) in listed)
    with DatasetWriter(out, shard_size=shard_size, progress=progress, total=total or None) as writer:
        for ep, (sensors, stems) in listed:
            arrays, info = _episode_files(ep, stems, bool(sensors), skipped)
            n = len(stems) if sensors else len(next(iter(arrays.values()), ()))
            if not n:
                skipped.append(f"{ep.name}/ (no frames)")
                continue
            names = stems if sensors else [f"{t:06d}" for t in range(n)]
            for t, stem in enumerate(names):
                sample = _frame(ep.name, stem, t, sensors, arrays, rows)
                writer.write(sample)
                for field in sample:
                    if field != "__key__":
                        fields[field] = fields.get(field, 0) + 1
            meta[ep.name] = {"frames": n, **info}
    path = Path(out) / EPISODES_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(meta, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)
    frames = sum(int(m["frames"]) for m in meta.values())
    return {"episodes": len(meta), "frames": frames, "fields": fields, "skipped": skipped}


def _sensor_files(ep: Path) -> tuple[dict[str, dict[str, Path]], list[str]]:
    """An episode's sensor folders (name -> frame name -> file) and its frame names in order."""
    sensors = {d.name: {f.stem: f for f in d.iterdir() if f.is_file() and not f.name.startswith(".")}
               for d in sorted(ep.iterdir()) if d.is_dir() and not d.name.startswith(".")}
    return sensors, sorted({s for files in sensors.values() for s in files}, key=_frame_order)


def _episode_files(ep: Path, stems: list[str], has_sensors: bool,
                   skipped: list[str]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The files beside an episode's sensor folders: ``.npy`` arrays of one row per frame (others
    are skipped and listed) and the parsed ``.json`` files."""
    arrays: dict[str, np.ndarray] = {}
    info: dict[str, Any] = {}
    for f in sorted(p for p in ep.iterdir() if p.is_file() and not p.name.startswith(".")):
        if f.suffix == ".json":
            info[f.name] = json.loads(f.read_text(encoding="utf-8"))
        elif f.suffix == ".npy":
            arrays[f.stem] = np.load(f, mmap_mode="r", allow_pickle=False)
        else:
            skipped.append(f"{ep.name}/{f.name} (not in a sensor folder, not .npy or .json)")
    n = len(stems) if has_sensors else len(next(iter(arrays.values()), ()))
    for name in list(arrays):
        if arrays[name].ndim == 0 or arrays[name].shape[0] != n:
            skipped.append(f"{ep.name}/{name}.npy (shape {arrays[name].shape}, not one row per "
                           f"frame of the episode's {n})")
            del arrays[name]
    return arrays, info


def _frame(episode: str, stem: str, t: int, sensors: Mapping[str, Mapping[str, Path]],
           arrays: Mapping[str, np.ndarray], rows: Mapping[str, tuple[np.dtype[Any], int]]) -> dict[str, Any]:
    """Sample ``<episode>/<stem>``: each sensor's file of that frame and row ``t`` of each array."""
    sample: dict[str, Any] = {"__key__": f"{episode}/{stem}"}
    for sensor, files in sensors.items():
        got = files.get(stem)
        if got is None:
            continue
        if sensor in rows:
            dtype, cols = rows[sensor]
            data = np.fromfile(got, dtype=dtype)
            if data.size % cols:
                raise ConfigError(f"{got}: {data.size} values of {dtype} are not rows of {cols}",
                                  path=str(got), fix=f"check the sensor's dtype and column count (raw={{{sensor!r}: "
                                  f"(dtype, columns)}}, or --raw {sensor}:f4:4 on the command line)")
            sample[f"{sensor}.npy"] = data.reshape(-1, cols)
        else:
            sample[f"{sensor}{got.suffix.lower()}"] = got.read_bytes()
    for name, arr in arrays.items():
        sample[f"{name}.npy"] = np.asarray(arr[t])
    return sample
