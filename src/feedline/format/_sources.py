"""Find the files to pack, group them into samples, and plan which samples go to which shard.

Sources are folders (walked recursively; hidden files and folders skipped, and the
metadata operating systems leave in trees and archives -- ``__MACOSX/``, ``Thumbs.db``,
``desktop.ini``, ``$RECYCLE.BIN`` -- skipped and listed: :data:`OS_METADATA`) or
list files (one path per line; blank lines and ``#`` comments skipped). A
file's *name* is its path relative to the folder (or the list file's folder).

How names become samples (:class:`SourceRules`):

``key="webdataset"`` (default)
    The WebDataset rule: the key runs to the first dot of the name's last
    part, the field is the rest, so ``000123.cam0.jpg`` and ``000123.json``
    are fields ``cam0.jpg`` and ``json`` of one sample ``000123``.
``key="file"``
    Every file is its own sample: the key is the name minus its final
    extension and the field is that extension, so ``IMG_2023.01.05_1234.jpg``
    is one sample. Dots left in the key's last part are stored as ``%2E``
    (and ``%`` as ``%25``) so that tar and WebDataset readers split the member
    name back into the same key: ``cats/IMG_2023%2E01%2E05_1234.jpg``. The
    manifest says so (``key_escape``), and feedline's readers give the key back
    as the file was named (``__key__`` ``cats/IMG_2023.01.05_1234``).

``key="folder"``
    Every folder that holds files is one sample; each file in it is a field named
    by its file name (image extensions normalised): a video clip stored as frames,
    ``clip_0001/frame_000.jpg ... frame_015.jpg``, is sample ``clip_0001`` with
    fields ``frame_000.jpg`` ... ``frame_015.jpg``; files directly in a source are
    skipped. Dots in the folder's name are stored as ``%2E``, as with ``file``.
    Nested folders are samples at any depth (``scene_007/frame_00012/`` is key
    ``scene_007/frame_00012``); a folder holding files *and* sample folders
    (``scene_007/calib.json``) is a sample too, which :meth:`Collection.notes`
    warns about with the ``--exclude`` that leaves such files out.
    A file whose field would start with ``__`` (``clip/__key__``) is skipped: such names
    are a sample's own entries (``__key__``), under every rule.
    With ``labels="from-folder"`` the samples are ``<class>/<sample>/`` folders.

``key="parallel"``
    Parallel folders, one per field, holding files of the same names (a
    segmentation set ``images/x.jpg`` + ``masks/x.png``, Pascal VOC's
    ``JPEGImages/`` + ``SegmentationClass/``): the top folder names the field and
    the rest of the path minus its final extension is the key, so those two
    files are fields ``images.jpg`` and ``masks.png`` of sample ``x`` (deeper
    folders stay in the key: ``images/train/x.jpg`` is key ``train/x``). Dots
    in the key are escaped as with ``file``. A file with no partner is a sample
    missing that field (said by :meth:`Collection.notes`); files directly in a
    source are skipped. Labels do not combine with it: put them in a folder of
    their own (``labels/x.cls`` gives field ``labels.cls``).

``labels="from-folder"`` reads an ImageFolder tree (``root/<class>/.../<image>``):
every sample gets an integer field ``cls``, the index of its top-level folder
in the sorted list of class folders (Python's sort of the folder names,
case-sensitive, exactly as torchvision's ``ImageFolder`` numbers them; hidden
folders are skipped, which torchvision would count). It implies
``key="file"`` unless a key rule is given, and packs only image files unless
``include`` patterns are given.

``labels=<file>`` (``.csv``, ``.tsv``, ``.jsonl``, ``.json``: a label table or
COCO annotations, see :mod:`feedline.format._labels`) packs the files the
table names, each with its ``cls`` (when the table has one label per file)
and a ``json`` field with the rest of its row (COCO: its boxes); files it
does not name are skipped and listed, as are entries that name no file. It
implies ``key="file"`` unless a key rule is given.

``classes`` fixes the class list (label = index in it) instead of taking it
from this source: pack ``val/`` with ``train/``'s list (``feedline pack val/
--labels from-folder --classes data/train``) so that a split missing a class
folder, or holding one more, cannot shift the numbers silently; a class that
is not in the list is an error naming it.

Image extensions are normalised to one field name each, whatever their case:
``.jpg/.jpeg/.jpe/.JPEG`` -> ``jpg``, ``.tif/.tiff`` -> ``tiff``, ``.png``
-> ``png`` (kept apart from ``jpg``: the bytes differ and so does the decoder).

``include``/``exclude`` are glob patterns; one without ``/`` is matched
against the file name, one with ``/`` against the whole name (``*`` crosses
``/``). Files that fit no rule (no field extension, outside any class folder,
not an image, a dangling or outside symbolic link, not a regular file) are
skipped and reported, not fatal. Symbolic links are followed only while they
stay inside the source folder, unless ``follow_symlinks``; a link loop is an error.
"""

from __future__ import annotations

import errno
import fnmatch
import json
import os
import stat
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import NamedTuple

from feedline.errors import ConfigError, ReadError
from feedline.format._labels import SUFFIXES, LabelTable, nfc, read_table
from feedline.format._schema import STRICT_LABELS
from feedline.format._tar import (
    BLOCK,
    END_OF_ARCHIVE,
    escape_key_part,
    header_upper_bound,
    round_up,
    split_name,
)

KEY_RULES = ("webdataset", "file", "folder", "parallel")
LABEL_MODES = ("from-folder",)
LABEL_FIELD = "cls"
EXTRA_FIELD = "json"
IMAGE_FIELDS: dict[str, str] = {
    "jpg": "jpg", "jpeg": "jpg", "jpe": "jpg", "png": "png", "ppm": "ppm", "pgm": "pgm",
    "bmp": "bmp", "tif": "tiff", "tiff": "tiff", "webp": "webp",
}
"""Image file extensions (lower case) and the one field name each is stored under."""
OS_METADATA = frozenset({"__macosx", "thumbs.db", "ehthumbs.db", "desktop.ini", "$recycle.bin",
                         "system volume information"})
"""Names (lower case) of files and folders that operating systems and archivers write into a
tree (macOS zips' ``__MACOSX/`` of AppleDouble copies, Windows' thumbnail caches): never
data, never a class folder (torchvision's ``ImageFolder`` would count ``__MACOSX`` as a
class and shift every label after it)."""
PICKLE_EXTENSIONS = frozenset({"pkl", "pickle", "pyd", "ckpt"})
"""Extensions of files that hold arbitrary Python pickles: packed as bytes, with a note (never
unpickled). ``.pt``/``.pth`` are not here: they load through ``torch.load(weights_only=True)``
(:func:`feedline.decode.codecs.decode_torch`), which rebuilds tensors and containers only."""


class SourceFile(NamedTuple):
    """One member of a sample: field name, path on disk and size at planning time.

    ``data`` holds the bytes of a member made by pack itself (the ``cls`` label);
    its ``path`` is then empty. ``nofollow``: the walk found a file, not a symbolic
    link, at ``path``, so it is read without following one (a link put in its place
    after the listing, to a file outside the tree, is refused).
    """

    field: str
    path: str
    size: int
    data: bytes | None = None
    nofollow: bool = False


@dataclass(frozen=True)
class PlannedSample:
    """A sample to pack: key and files sorted by field name."""

    key: str
    files: tuple[SourceFile, ...]

    @cached_property
    def nbytes(self) -> int:
        """Payload bytes of the sample."""
        return sum(f.size for f in self.files)

    @cached_property
    def sources(self) -> int:
        """Files of the sample read from disk (a ``cls`` member made by pack is not one)."""
        return sum(1 for f in self.files if f.data is None)

    def bound(self, align: int) -> int:
        """Upper bound of the bytes this sample takes in a shard, headers and padding included."""
        total = 0
        for n, f in enumerate(self.files):
            name = f"{self.key}.{f.field}"
            total += header_upper_bound(name, f.size, align if n == 0 else 0) + round_up(f.size, BLOCK)
        return total


@dataclass(frozen=True)
class SourceRules:
    """How files become samples (see the module docstring).

    Args:
        key: ``"webdataset"``, ``"file"`` or ``"folder"``; None: ``"file"`` with
            ``labels="from-folder"``, else ``"webdataset"``.
        labels: None, ``"from-folder"`` (an integer ``cls`` per sample from its class
            folder), or the path of a labels file (``.csv``, ``.tsv``, ``.jsonl``, ``.json``).
        include: glob patterns a file must match (any); empty: every file
            (image files only with ``labels="from-folder"``).
        exclude: glob patterns that leave a file out.
        follow_symlinks: follow symbolic links that lead outside the source folder.
        classes: the class names in label order (another split's), for class-name labels;
            None: the sorted names this source holds.
        class_depth: with ``labels="from-folder"``, how many folder levels name the class:
            1 (torchvision's ``ImageFolder``: ``<class>/.../<image>``), 2 for a tree of
            ``<group>/<class>/<image>`` whose classes are ``"group/class"``, and so on.
        label_column: with a CSV/TSV ``labels`` file, its label column (several
            comma-separated: one-hot columns; ``"none"``: no ``cls``); None: found by its
            name or as one-hot columns (see :mod:`feedline.format._labels`).
    """

    key: str | None = None
    labels: str | None = None
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    follow_symlinks: bool = False
    classes: tuple[str, ...] | None = None
    label_column: str | None = None
    class_depth: int = 1

    def __post_init__(self) -> None:
        if self.label_column is not None and (self.labels is None or self.labels in LABEL_MODES):
            raise ConfigError("label_column: names a column of a labels file, and labels is "
                              f"{self.labels!r}", field="label_column",
                              fix="give the table too: --labels train.csv --label-column breed")
        if isinstance(self.class_depth, bool) or not isinstance(self.class_depth, int) \
                or not 1 <= self.class_depth <= 64:
            raise ConfigError(f"class_depth: must be an int from 1 to 64, got {self.class_depth!r}",
                              field="class_depth")
        if self.class_depth != 1 and self.labels != "from-folder":
            raise ConfigError("class_depth: counts the class folders of --labels from-folder, and labels "
                              f"is {self.labels!r}", field="class_depth",
                              fix="add --labels from-folder, or drop --class-depth")
        if self.key is not None and self.key not in KEY_RULES:
            raise ConfigError(f"key: must be one of {', '.join(KEY_RULES)}, got {self.key!r}")
        if self.key == "folder" and self.labels is not None and self.labels not in LABEL_MODES:
            raise ConfigError("key: 'folder' (one sample per folder) does not combine with a labels "
                              "file, which labels files one by one",
                              fix="label the sample folders by class folders (--labels from-folder), or "
                              "put a label file (000.cls) into each sample folder")
        if self.key == "parallel" and self.labels is not None:
            raise ConfigError("key: 'parallel' (the top folders name the fields: images/x.jpg + masks/x.png) "
                              "does not combine with labels, which label files by their class folder or name",
                              fix="put the labels in a folder of their own beside the others (labels/x.cls), "
                              "or pack with --key file")
        if self.labels is not None and self.labels not in LABEL_MODES and not (
                isinstance(self.labels, (str, os.PathLike))
                and os.fspath(self.labels).lower().endswith(SUFFIXES)):
            raise ConfigError(f"labels: must be from-folder or a labels file ({', '.join(SUFFIXES)}), "
                              f"got {self.labels!r}", fix="name a .csv/.tsv/.jsonl/.json file, or from-folder")
        for name in ("include", "exclude"):
            patterns = getattr(self, name)
            if isinstance(patterns, str) or not all(isinstance(p, str) and p for p in patterns):
                raise ConfigError(f"{name}: must be a list of non-empty glob patterns, got {patterns!r}")
            object.__setattr__(self, name, tuple(patterns))
        if self.classes is not None:
            names = self.classes
            if isinstance(names, str) or not all(isinstance(c, str) and c for c in names) \
                    or len(set(names)) != len(tuple(names)):
                raise ConfigError(f"classes: must be a list of distinct class names, got {names!r}")
            if self.labels is None:
                raise ConfigError("classes: given without labels", fix="add --labels from-folder or --labels FILE")
            object.__setattr__(self, "classes", tuple(names))

    @property
    def key_rule(self) -> str:
        """The key rule in force."""
        if self.key is not None:
            return self.key
        return "webdataset" if self.labels is None else "file"


@dataclass(frozen=True)
class Skipped:
    """A file left out of the pack, and why."""

    name: str
    reason: str


@dataclass
class Collection:
    """What :func:`collect` found.

    Attributes:
        samples: the samples, sorted by key.
        classes: the class folder names in label order (``labels="from-folder"``), else None.
        skipped: files that fit no rule, in walk order.
        excluded: files left out by ``exclude`` or by not matching ``include``.
        field_counts: samples holding each field.
        empty_classes: class folders that gave no sample.
        empty_files: names of the zero-byte files packed (they decode to nothing).
        unmatched: entries of a labels file that name no file found.
        enclosing: ``key="folder"``: samples whose folder also holds sample folders
            (``scene_007/calib.json`` beside ``scene_007/frame_00012/``), with their fields.
        label_note: why a labels file gave no ``cls`` although it holds labels; or, with
            ``labels="from-folder"``, that the class folders hold only sub-folders.
        rule: the key rule the samples were grouped by.
    """

    samples: list[PlannedSample]
    classes: tuple[str, ...] | None = None
    skipped: list[Skipped] = field(default_factory=list)
    excluded: int = 0
    field_counts: dict[str, int] = field(default_factory=dict)
    empty_classes: list[str] = field(default_factory=list)
    empty_files: list[str] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)
    enclosing: dict[str, list[str]] = field(default_factory=dict)
    label_note: str | None = None
    rule: str = "webdataset"

    def _partial_fields(self, limit: int) -> list[str]:
        """Fields only some samples hold: one line each, or one line for them all when there are
        many; one line naming ``--key file`` when dotted names were split at their first dot
        (``frame.000123.jpg`` -> sample ``frame``, field ``000123.jpg``)."""
        loners = {s.key for s in self._loners()}
        n = len(self.samples) - len(loners)
        counts = dict(self.field_counts)
        for s in self.samples:
            if s.key in loners:
                for f in s.files:
                    counts[f.field] -= 1
        partial = [(name, count) for name, count in sorted(counts.items()) if 0 < count < n]
        if self._dotted_names():
            big = max(self.samples, key=lambda s: len(s.files))
            shown = ", ".join(repr(f.field) for f in big.files[:3])
            return [f"{len(self.field_counts)} distinct fields in {n} sample(s) (sample {big.key!r} has "
                    f"{len(big.files)}: {shown}, ...). The WebDataset rule (the default --key) ends a key at "
                    "the first dot of the file name, so dotted names (frame.000123.jpg, scan.v2.npy) become "
                    "one sample per prefix ('frame') with a field per file: --key file makes each file its "
                    "own sample, keyed by its name minus the final extension ('frame.000123')"]
        if partial and self.rule == "webdataset" and self._parallel_folders():
            tops = sorted({s.key.partition("/")[0] for s in self.samples if "/" in s.key})
            return [f"field(s) {', '.join(repr(f) for f, _ in partial[:limit])} are each in only some samples, "
                    f"and the folders {', '.join(map(repr, tops[:limit]))} hold files of the same names: if "
                    "they are one sample's parts (images/x.jpg + masks/x.png), --key parallel packs them as "
                    "fields of one sample (images.jpg, masks.png of key 'x')"]
        if len(partial) > 1 and all(f in IMAGE_FIELDS.values() for f, _ in partial) \
                and sum(c for _, c in partial) == n:
            shown = " + ".join(f"{name!r} ({count})" for name, count in partial)
            names = ", ".join(repr(f) for f, _ in partial)
            return [f"the images are in {len(partial)} formats, one a sample: {shown} of {n}; "
                    f"vision.ImageTransform(({names}), size=..., out='image') reads whichever a sample has "
                    "and gives one dense 'image' field"]
        if len(partial) <= limit:
            return [f"field {name!r} is in {count} of {n} samples only: a batch reads it per sample "
                    "(use --exclude to leave such files out, or convert them to one format)"
                    for name, count in partial]
        shown = ", ".join(f"{name!r} ({count})" for name, count in partial[:limit])
        return [f"{len(partial)} fields are each in only some of the {n} samples: {shown} and "
                f"{len(partial) - limit} more (use --exclude to leave such files out, or convert them to "
                "one format)"]

    def _dotted_names(self) -> bool:
        """File names with dots split at their first dot by the WebDataset rule: more distinct
        fields than samples (and more than a multi-camera log has), or a few dotted names
        among plain ones (doc.001.v2.txt and doc.007.v2.txt beside doc_002.txt: sample 'doc'
        holds two dotted fields that no other sample has; before: only 'use --exclude')."""
        fields = len(self.field_counts)
        if self.rule != "webdataset":
            return False
        if fields > 16 and fields > len(self.samples):
            return True
        return len(self.samples) > 1 and any(
            sum("." in f.field and self.field_counts.get(f.field) == 1 for f in s.files) >= 2
            for s in self.samples)

    def _parallel_folders(self) -> bool:
        """Whether most samples have a namesake in another top folder holding other fields
        (images/x.jpg + masks/x.png; not episode_000/step_0001 + episode_001/step_0001, whose
        fields are the same)."""
        tops: dict[str, dict[str, frozenset[str]]] = {}
        for s in self.samples:
            top, slash, rest = s.key.partition("/")
            if slash:
                tops.setdefault(rest, {})[top] = frozenset(f.field for f in s.files)
        paired = sum(len(t) for t in tops.values() if len(t) > 1 and len(set(t.values())) == len(t))
        return paired * 2 > len(self.samples)

    def _sensor_note(self) -> str | None:
        """Recorded episodes, one folder per sensor (``episode_0007/cam_front/000123.jpg`` beside
        ``episode_0007/lidar/000123.bin``): the default rule makes each sensor's frame a sample
        of its own, where a policy needs one sample per frame with every sensor as a field."""
        if self.rule == "parallel":
            return self._episodes_as_fields()
        if self.rule != "webdataset":
            return None
        sensors: dict[tuple[str, str], set[str]] = {}
        deep = 0
        for s in self.samples:
            parts = s.key.rsplit("/", 2)
            if len(parts) == 3:
                deep += 1
                sensors.setdefault((parts[0], parts[2]), set()).add(parts[1])
        paired = sum(len(v) for v in sensors.values() if len(v) > 1)
        if deep * 2 <= len(self.samples) or paired * 2 <= deep:
            return None
        names = sorted({n for v in sensors.values() if len(v) > 1 for n in v})
        episode, frame = next(k for k, v in sensors.items() if len(v) > 1)
        return (f"these look like recorded episodes, one folder per sensor ({', '.join(map(repr, names[:4]))}"
                f"{', ...' if len(names) > 4 else ''}: {episode}/<sensor>/{frame}.*), and the default rule "
                "makes each sensor's frame a sample of its own. For one sample per frame with every sensor "
                "as a field (and the frame's row of each per-episode .npy), pack with --key episode "
                "(feedline.episodes.pack), then read training windows with feedline.episodes.Windows "
                "(docs/packing.md, 'Recorded episodes')")

    def _episodes_as_fields(self) -> str | None:
        """``--key parallel`` on recorded episodes (``episode_0007/cam_front/000123.jpg``): the
        episode folders became fields and frame 123 of every episode one sample."""
        keyed = [s for s in self.samples if "/" in s.key]
        if len(keyed) * 2 <= len(self.samples):
            return None
        tops = sorted({f.field.rpartition(".")[0] for s in keyed for f in s.files})
        if len(tops) < 2 or len({t.strip("0123456789_-") for t in tops}) != 1:
            return None  # numbered folders (episode_0000, scene-12), not images/ + masks/ or left/ + right/
        crowded = sum(1 for s in keyed if max(Counter(f.field.rpartition(".")[2] for f in s.files).values()) >= 2)
        if crowded * 2 <= len(keyed):
            return None
        return (f"--key parallel took the top folders ({', '.join(map(repr, tops[:3]))}"
                f"{', ...' if len(tops) > 3 else ''}) for fields, so sample {keyed[0].key!r} holds that frame "
                "of every one of them. If they are recorded episodes with a folder per sensor, --key episode "
                "packs one sample per frame with every sensor as a field (docs/packing.md, 'Recorded episodes')")

    def _loners(self) -> list[PlannedSample]:
        """WebDataset rule: samples sharing no field with the most common sample's fields and
        named alike in two or more folders (``episode_000/meta.json`` beside the episode's
        ``step_0001.cam.png``...): files kept per folder, not samples."""
        if self.rule != "webdataset" or len(self.samples) < 3:
            return []
        kinds = Counter(frozenset(f.field for f in s.files) for s in self.samples)
        common = kinds.most_common(1)[0][0]
        apart = [s for s in self.samples if "/" in s.key and not common & {f.field for f in s.files}]
        def kind(s: PlannedSample) -> tuple[str, ...]:  # its name in its folder, and its fields
            return (s.key.rpartition("/")[2], *sorted(f.field for f in s.files))

        folders: dict[tuple[str, ...], set[str]] = {}
        for s in apart:
            folders.setdefault(kind(s), set()).add(s.key.rpartition("/")[0])
        return [s for s in apart if len(folders[kind(s)]) > 1]

    def _loner_note(self, limit: int) -> list[str]:
        loners = self._loners()
        if not loners:
            return []
        files = sorted({f"*/{s.key.rpartition('/')[2]}.{f.field}" for s in loners for f in s.files})
        shown = ", ".join(f"{s.key} ({', '.join(f.field for f in s.files)})" for s in loners[:limit])
        more = f" and {len(loners) - limit} more" if len(loners) > limit else ""
        return [f"{len(loners)} sample(s) share no field with the others and are named alike in several folders: "
                f"{shown}{more}. If they are files kept per folder (an episode's or a scene's metadata), "
                "batches mix them in with every other field missing: leave them out with --exclude "
                f"{' '.join(repr(f) for f in files[:3])} and read them by the sample's key"]

    def notes(self, limit: int = 5) -> list[str]:
        """One line per thing the user should hear about: skipped files, fields
        missing from some samples, empty class folders."""
        lines: list[str] = []
        if self.skipped:
            shown = "; ".join(f"{s.name} ({s.reason})" for s in self.skipped[:limit])
            more = f"; and {len(self.skipped) - limit} more" if len(self.skipped) > limit else ""
            lines.append(f"skipped {len(self.skipped)} file(s) that fit no rule: {shown}{more}")
        if self.label_note:
            lines.append(self.label_note)
        if self.enclosing:
            shown = "; ".join(f"{k}/ ({', '.join(fs)})" for k, fs in list(self.enclosing.items())[:limit])
            more = f"; and {len(self.enclosing) - limit} more" if len(self.enclosing) > limit else ""
            fields = sorted({f for fs in self.enclosing.values() for f in fs})
            lines.append(
                f"--key folder: {len(self.enclosing)} folder(s) hold files beside sample folders and "
                f"became samples of their own: {shown}{more}. If those files belong to the samples "
                "below them (a scene's calibration), batches mix those samples in with the others' "
                "fields missing: leave them out with --exclude "
                f"{' '.join(repr('*/' + f) for f in fields[:3])} and read them by the sample's key, "
                "or copy them into every sample folder"
            )
        sensors = self._sensor_note()
        if sensors:  # the loner and partial-field notes would advise leaving out whole sensors
            lines.append(sensors)
        else:
            lines.extend(self._loner_note(limit))
            lines.extend(self._partial_fields(limit))
        pickled = sorted(f for f in self.field_counts if f.lower().rsplit(".", 1)[-1] in PICKLE_EXTENSIONS)
        if pickled:
            lines.append(
                f"field(s) {', '.join(map(repr, pickled))} hold Python pickles (torch.save, pickle): "
                "feedline never unpickles (loading one can run any code), so they load as bytes; "
                "save arrays with numpy.save (.npy) or tensors with torch.save as .pt (loaded with "
                "torch.load(weights_only=True): tensors and containers only), or pass "
                "Loader(decode={field: fn}) with a module-level function for files you trust"
            )
        if self.empty_files:
            shown = ", ".join(self.empty_files[:limit])
            more = f" and {len(self.empty_files) - limit} more" if len(self.empty_files) > limit else ""
            lines.append(
                f"{len(self.empty_files)} empty file(s) (0 bytes) packed: {shown}{more}; decoding them "
                "fails (Loader on_error='skip' skips them): re-create them or --exclude them"
            )
        if self.unmatched:
            shown = ", ".join(self.unmatched[:limit])
            more = f" and {len(self.unmatched) - limit} more" if len(self.unmatched) > limit else ""
            lines.append(f"{len(self.unmatched)} entr(y/ies) of the labels file name no file found: "
                         f"{shown}{more} (names are paths below SRC, or bare file names)")
        if self.empty_classes:
            lines.append(
                f"class folder(s) with no files packed: {', '.join(self.empty_classes[:limit])} "
                "(they keep their label numbers, as torchvision's ImageFolder would)"
            )
        return lines


def normalise_field(field_name: str) -> str:
    """The field's final extension, if it names an image format, in its one spelling."""
    head, dot, ext = field_name.rpartition(".")
    norm = IMAGE_FIELDS.get(ext.lower())
    return f"{head}{dot}{norm}" if norm is not None else field_name


def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    base = name.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(name if "/" in p else base, p) for p in patterns)


class _Walker:
    """Walks one source folder, following links only inside it (or everywhere when asked)."""

    def __init__(self, root: Path, skip: Path | None, follow: bool, skipped: list[Skipped],
                 prune: tuple[str, ...] = ()) -> None:
        self.root = root
        self.real_root = os.path.realpath(root)
        self.skip = skip
        self.follow = follow
        self.skipped = skipped
        # exclude patterns with a "/" that take every file below a folder ('scratch/*'): an
        # unreadable folder or a link loop there is no error (its files would be left out)
        self.prune = tuple(p for p in prune if "/" in p)
        self.links: set[str] = set()  # paths of the files listed that are symbolic links

    def _pruned(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name + "/\0", p) for p in self.prune)

    def _inside(self, real: str) -> bool:
        return real == self.real_root or real.startswith(self.real_root.rstrip(os.sep) + os.sep)

    def top_folders(self) -> list[str]:
        """Non-hidden sub-folders of the root (links included, as torchvision counts them)."""
        names = []
        reported, self.skipped = self.skipped, []  # files() reports the same entries again
        try:
            for name, path, st in self._entries(str(self.root), ""):
                if stat.S_ISDIR(st.st_mode) and not self._is_skip(path):
                    names.append(name)
        finally:
            self.skipped = reported
        return names

    def _is_skip(self, path: str) -> bool:
        return self.skip is not None and os.path.realpath(path) == str(self.skip)

    def _entries(self, folder: str, prefix: str) -> Iterator[tuple[str, str, os.stat_result]]:
        try:
            with os.scandir(folder) as it:
                entries = sorted((e for e in it if not e.name.startswith(".")), key=lambda e: e.name)
        except PermissionError as e:
            where = prefix.rstrip("/")
            if where and self._pruned(where):
                return
            raise ReadError(
                f"cannot read the source folder {folder!r}: {e.strerror}", path=folder,
                fix=f"give this user read access to it (chmod u+rx), or leave it out with --exclude '{where}/*'"
                if where else "give this user read access to it (chmod u+rx)",
            ) from None
        for entry in entries:
            name = prefix + entry.name
            if entry.name.lower() in OS_METADATA:
                self.skipped.append(Skipped(name, "operating-system metadata, not data"))
                continue
            if not entry.is_symlink():
                yield name, entry.path, entry.stat(follow_symlinks=False)
                continue
            target = os.readlink(entry.path)
            try:
                st = os.stat(entry.path)
            except OSError as e:
                if e.errno == errno.ELOOP:
                    raise ConfigError(
                        f"symbolic-link loop at {entry.path!r} (-> {target!r})",
                        path=entry.path, fix="remove the link or point it at a real file",
                    ) from None
                if e.errno in (errno.ENOENT, errno.ENOTDIR):
                    self.skipped.append(Skipped(name, f"dangling symbolic link -> {target}"))
                    continue
                raise
            real = os.path.realpath(entry.path)
            if not self.follow and not self._inside(real):
                self.skipped.append(
                    Skipped(name, f"symbolic link to {real}, outside the source folder; --follow-symlinks packs it")
                )
                continue
            if not stat.S_ISDIR(st.st_mode):
                self.links.add(entry.path)
            yield name, entry.path, st

    def files(self) -> Iterator[tuple[str, str, os.stat_result]]:
        """(name, path, stat) of every file, sorted by name within each folder."""
        root_st = os.stat(self.root)
        yield from self._walk(str(self.root), "", {(root_st.st_dev, root_st.st_ino): str(self.root)})

    def _walk(self, folder: str, prefix: str, ancestors: dict[tuple[int, int], str]) -> Iterator[tuple[str, str, os.stat_result]]:
        for name, path, st in self._entries(folder, prefix):
            if stat.S_ISDIR(st.st_mode):
                if self._is_skip(path):
                    continue
                ident = (st.st_dev, st.st_ino)
                if ident in ancestors:
                    if self._pruned(name):
                        continue
                    raise ConfigError(
                        f"symbolic-link loop: {path!r} leads back to {ancestors[ident]!r}",
                        path=path, fix=f"remove the link, or leave it out with --exclude '{name}/*'",
                    )
                yield from self._walk(path, name + "/", {**ancestors, ident: path})
            elif stat.S_ISREG(st.st_mode):
                yield name, path, st
            else:
                self.skipped.append(Skipped(name, "not a regular file"))


_TABLES = (".csv", ".tsv", ".parquet", ".feather", ".arrow", ".h5", ".hdf5", ".npy", ".npz", ".xlsx",
           ".jsonl", ".ndjson", ".json")


def _table_error(list_file: Path, what: str) -> ConfigError | None:
    """A table given as SRC (``feedline pack features.csv``), which pack reads as a list of
    paths: say so and name both ways a table goes in (before: "cannot read listed file
    'f0,f1,...'"). ``None`` for other files."""
    if not list_file.name.lower().endswith(_TABLES):
        return None
    return ConfigError(
        f"{str(list_file)!r} is a table, and a file given as SRC is read as a list of paths, one "
        f"per line ({what})", path=str(list_file),
        fix=f"labels for files: feedline pack FOLDER --out DIR --labels {list_file.name}; rows of values "
            "(features, tokens): write them with feedline.DatasetWriter (docs/packing.md, 'Writing from "
            "Python'), or give feedline.Loader a map-style dataset over the table (a TensorDataset); "
            "documents to pretrain on: feedline.text.documents + write_token_blocks (docs/loading.md, 'Text')")


def _short(line: str) -> str:
    """A listed path for a message: a line of some other file (a 3 KB document) cut to 80 characters."""
    return repr(line) if len(line) <= 80 else f"{line[:77]!r}... ({len(line)} characters)"


def _listed(list_file: Path, skipped: list[Skipped]) -> Iterable[tuple[str, str, os.stat_result]]:
    base = list_file.parent
    try:
        with open(list_file, encoding="utf-8") as f:
            lines = [line.strip() for line in f]
    except (OSError, UnicodeDecodeError) as e:
        raise _table_error(list_file, "it is not UTF-8 text") or ConfigError(
            f"cannot read list file {str(list_file)!r}: {e}", fix="give a UTF-8 text file, one path per line") from None
    for number, line in enumerate(lines, 1):
        if not line or line.startswith("#"):
            continue
        if "\0" in line:  # no path holds a NUL: a binary file given as SRC (a .jpg, a .tar)
            raise _table_error(list_file, f"line {number} holds a NUL byte") or ConfigError(
                f"list file {str(list_file)!r} has a NUL byte in line {number}: it is not a list of paths",
                path=str(list_file), fix="give a folder, or a UTF-8 text file with one path per line",
            )
        path = base / line
        rel = os.path.relpath(path, base)
        if rel.startswith(".."):
            rel = path.name
        try:
            st = os.stat(path)
        except OSError as e:
            raise _table_error(list_file, f"line {number} names no file: {line[:60]!r}") or ConfigError(
                f"{list_file}: cannot read listed file {_short(line)}: {e.strerror}",
                fix="fix the path in the list file",
            ) from None
        if not stat.S_ISREG(st.st_mode):  # a FIFO would block pack's read, /dev/zero never end it
            skipped.append(Skipped(rel.replace(os.sep, "/"), "not a regular file"))
            continue
        yield rel.replace(os.sep, "/"), str(path), st


def _split(name: str, rule: str) -> tuple[str, str] | None:
    if rule == "folder":  # clip_0001/frame_000.jpg -> key clip_0001, field frame_000.jpg
        slash = name.rfind("/")
        base = name[slash + 1 :]
        if slash <= 0 or not base or base[0] == "." or "\n" in name:
            return None
        head, sep, last = name[:slash].rpartition("/")
        return head + sep + escape_key_part(last), normalise_field(base)
    if rule == "parallel":  # images/train/x.jpg -> key train/x, field images.jpg
        top, sep, rest = name.partition("/")
        inner = _split(rest, "file") if sep and top and top[0] != "." else None
        return None if inner is None else (inner[0], normalise_field(f"{top}.{inner[1]}"))
    if rule == "webdataset":
        parts = split_name(name)
        if parts is None:
            return None
        return parts[0], normalise_field(parts[1])
    slash = name.rfind("/") + 1
    dot = name.rfind(".")
    if dot <= slash or dot == len(name) - 1 or "\n" in name or name[slash] == ".":
        return None
    return name[:slash] + escape_key_part(name[slash:dot]), normalise_field(name[dot + 1 :])


def collect(
    sources: Iterable[str | os.PathLike[str]],
    rules: SourceRules | None = None,
    *,
    skip: str | os.PathLike[str] | None = None,
) -> Collection:
    """All samples from ``sources``, sorted by key (fields sorted by name).

    ``skip`` is a folder to leave out of the walk (pack's output folder).

    Raises:
        ConfigError: a missing source, the same key and field from two files,
            a symbolic-link loop, or no files at all.
        OSError: a folder that cannot be read (named by the error).
    """
    rules = rules or SourceRules()
    sources = list(sources)
    rule = rules.key_rule
    labelled = rules.labels == "from-folder"
    depth = rules.class_depth
    below: set[str] = set()  # class/sub-folder pairs (depth 1): a hint when every image is in one
    table = read_table(rules.labels, rules.classes, rules.label_column) if rules.labels is not None and not labelled else None
    table_real = os.path.realpath(table.path) if table is not None else None
    names: dict[str, str] = {}  # key -> file name (with a labels table)
    images_only = labelled and not rules.include
    grouped: dict[str, dict[str, SourceFile]] = {}
    labels: dict[str, str] = {}
    skipped: list[Skipped] = []
    excluded = 0
    empty_files: list[str] = []
    class_names: set[str] = set()
    shallow: set[str] = set()  # class folders holding an image directly (not only in sub-folders)
    skip_real = Path(os.path.realpath(skip)) if skip is not None else None
    for source in sources:
        src = Path(source)
        walker = None
        if src.is_dir():
            walker = _Walker(src, skip_real, rules.follow_symlinks, skipped, rules.exclude)
            if labelled and depth == 1:  # empty class folders keep their numbers, as in torchvision
                class_names.update(walker.top_folders())
            entries: Iterable[tuple[str, str, os.stat_result]] = walker.files()
        elif src.is_file():
            entries = _listed(src, skipped)
        elif os.path.lexists(src):
            raise ConfigError(f"source {str(src)!r} is neither a folder nor a list file", fix="pass a folder or a list file")
        else:
            raise ConfigError(f"source {str(src)!r} does not exist", fix="pass a folder or a list file")
        for name, path, st in entries:
            if (rules.include and not _matches(name, rules.include)) or (rules.exclude and _matches(name, rules.exclude)) \
                    or (table_real is not None and os.path.realpath(path) == table_real):
                excluded += 1
                continue
            if images_only and name.rpartition(".")[2].lower() not in IMAGE_FIELDS:
                ext = name.rpartition(".")[2] if "." in name.rpartition("/")[2] else ""
                skipped.append(Skipped(name, f"not an image type ImageFolder reads; --include replaces that choice: "
                                       f"--include '*.{ext}' --include '*.jpg' ..."
                                       if ext else "not an image; --include patterns choose what to pack"))
                continue
            parts = _split(name, rule)
            if parts is None:
                skipped.append(Skipped(name, "a newline in its name: WebDataset's readers cannot "
                                       "store it (rename the file)" if "\n" in name
                                       else "not inside a sample folder" if rule == "folder"
                                       else "not inside a field folder (--key parallel: <field>/<name>)"
                                       if rule == "parallel" and "/" not in name
                                       else "no field extension"))
                continue
            if labelled and rule == "folder" and name.count("/") < 2:
                skipped.append(Skipped(name, "directly in its class folder, not in a sample folder "
                                       "(--key folder: <class>/<sample>/<file>)"))
                continue
            key, field_name = parts
            if field_name.startswith("__"):  # a clip's "__key__" file would replace the sample's key
                skipped.append(Skipped(name, f"field {field_name!r} starts with '__', which names a sample's "
                                       "own entries (__key__, __url__), not a file: rename the file"))
                continue
            if labelled:
                if name.count("/") < depth:
                    skipped.append(Skipped(name, "not inside a class folder" if depth == 1 else
                                           f"not {depth} folders deep (--class-depth {depth}: "
                                           f"{'/'.join(['<folder>'] * depth)}/<image>)"))
                    continue
                labels[key] = "/".join(name.split("/")[:depth])
                class_names.add(labels[key])
                if name.count("/") == depth:
                    shallow.add(labels[key])
                elif depth == 1:
                    below.add("/".join(name.split("/")[:2]))
            if table is not None:
                names[key] = name
            sample = grouped.setdefault(key, {})
            if field_name in sample:
                raise ConfigError(
                    f"two files give key {key!r} field {field_name!r}: {sample[field_name].path!r} and {path!r}",
                    key=key,
                    field=field_name,
                    fix="each key.field must come from one file (rename one, or --exclude it)",
                )
            sample[field_name] = SourceFile(field_name, path, st.st_size,
                                            nofollow=walker is not None and path not in walker.links)
            if st.st_size == 0 and field_name.lower().rsplit(".", 1)[-1] not in STRICT_LABELS:
                empty_files.append(name)  # (an empty cls label is refused by the pack, naming it)
    if not grouped and table is None:
        detail = f" ({len(skipped)} skipped, {excluded} excluded by the patterns)" if skipped or excluded else ""
        raise ConfigError(f"no files to pack in the sources{detail}", fix="check the SRC paths and the --include/--exclude patterns")
    unmatched: list[str] = []
    if table is not None:
        roots = [os.path.basename(os.path.normpath(os.fspath(s))) for s in sources]
        roots += [os.path.basename(os.path.realpath(s)) for s in sources]
        unmatched = _apply_table(table, grouped, names, skipped, roots)
    if labelled and depth == 1:
        _refuse_splits(class_names, shallow, sources)
    classes = _class_list(class_names, rules.classes) if labelled else table.classes if table is not None else None
    if classes is not None and labelled:
        number = {c: str(i).encode("ascii") for i, c in enumerate(classes)}
        for i, c in enumerate(classes):  # a folder unpacked on a Mac spells it decomposed
            number.setdefault(nfc(c), str(i).encode("ascii"))
        for key, sample in grouped.items():
            if LABEL_FIELD in sample:
                raise ConfigError(
                    f"sample {key!r} already has a {LABEL_FIELD!r} field, and --labels from-folder adds one",
                    key=key, fix="exclude the .cls files or drop --labels",
                )
            data = number.get(labels[key]) or number[nfc(labels[key])]
            sample[LABEL_FIELD] = SourceFile(LABEL_FIELD, "", len(data), data)
    samples = [PlannedSample(key, tuple(files[f] for f in sorted(files))) for key, files in sorted(grouped.items())]
    counts: dict[str, int] = {}
    for s in samples:
        for f in s.files:
            counts[f.field] = counts.get(f.field, 0) + 1
    used = {nfc(c) for c in labels.values()}
    empty = [c for c in classes if nfc(c) not in used] if classes is not None and labelled else []
    if not samples:
        raise ConfigError(f"no files to pack: none of the files found is named in {table.path if table else 'SRC'}",
                          fix="check that the labels file names files below SRC (paths or bare names)")
    enclosing = _enclosing(grouped) if rule == "folder" else {}
    note = table.note if table is not None else _nested_note(classes, shallow, below) if labelled else None
    return Collection(samples, classes, skipped, excluded, counts, empty, empty_files, unmatched, enclosing,
                      note, rule)


def _nested_note(classes: tuple[str, ...] | None, shallow: set[str], below: set[str]) -> str | None:
    """With ``--labels from-folder``: when no class folder holds an image directly and the
    sub-folders would give more classes (``mammal/cat``, ``mammal/dog``), say which folders
    became the classes and how to use the sub-folders instead; nothing otherwise."""
    if not classes or shallow or len(below) <= len(classes):
        return None
    shown = ", ".join(sorted(below)[:3])
    return (f"every image lies in a sub-folder of its class folder ({shown}, ...): the {len(classes)} "
            f"top folders are the classes, as torchvision's ImageFolder numbers them; if the "
            f"sub-folders are the classes, --class-depth 2 makes each of the {len(below)} a class")


def _enclosing(grouped: dict[str, dict[str, SourceFile]]) -> dict[str, list[str]]:
    """Sample keys that are folders of other samples' keys, with their fields, sorted."""
    above = {key.rsplit("/", k)[0] for key in grouped for k in range(1, key.count("/") + 1)}
    return {key: sorted(grouped[key]) for key in sorted(grouped) if key in above}


SPLIT_NAMES = frozenset({"train", "training", "val", "valid", "validation", "dev", "test", "testing",
                         "eval", "evaluation", "holdout"})
"""Folder names (case-insensitive) that name a dataset's split, not a class."""


def _refuse_splits(folders: set[str], shallow: set[str], sources: list[str | os.PathLike[str]]) -> None:
    """Refuse ``--labels from-folder`` on a folder of splits (``root/train/<class>/...``,
    ``root/val/<class>/...``): every top folder has a split's name and holds its images
    only in sub-folders. Each image would get its split as its class, silently."""
    if not folders or shallow or not all(f.casefold() in SPLIT_NAMES for f in folders):
        return
    splits = sorted(folders, key=lambda f: (f.casefold() not in ("train", "training"), f))
    root = os.fspath(sources[0]).rstrip("/") if len(sources) == 1 else "SRC"
    first, rest = splits[0], splits[1:]
    cmds = [f"feedline pack {root}/{first} --out OUT/{first} --labels from-folder"]
    cmds += [f"feedline pack {root}/{s} --out OUT/{s} --labels from-folder --classes OUT/{first}" for s in rest]
    raise ConfigError(
        f"the class folders of {root!r} are splits ({', '.join(splits)}), each holding class "
        "folders: --labels from-folder would label every image with its split, not its class",
        fix="pack each split on its own, the others with the first one's class list: " + "; ".join(cmds))


def _class_list(found: set[str], given: tuple[str, ...] | None) -> tuple[str, ...]:
    """The class folders in label order: ``given`` (checked to hold every folder found), or
    the sorted folder names."""
    if given is None:
        return tuple(sorted(found))
    known = {nfc(c) for c in given}  # names compare in NFC: splits unpacked on different systems
    extra = sorted(f for f in found if nfc(f) not in known)
    if extra:
        raise ConfigError(
            f"class folder(s) {', '.join(map(repr, extra[:5]))} are not in the given class list "
            f"({len(given)} classes: {', '.join(given[:5])}{', ...' if len(given) > 5 else ''})",
            fix="pack the split that has every class first and pass its dataset to --classes, "
            "or --exclude the folder",
        )
    return given


def _apply_table(table: LabelTable, grouped: dict[str, dict[str, SourceFile]], names: dict[str, str],
                 skipped: list[Skipped], roots: list[str]) -> list[str]:
    """Give each sample its row's ``cls``/``json`` fields; drop (and list) the samples the
    table does not name. Returns the table entries that named no file."""
    found, unmatched = table.match(names.values(), dict.fromkeys(roots))
    for key, name in names.items():
        row = found.get(name)
        sample = grouped[key]
        if row is None or row.blank:
            del grouped[key]
            skipped.append(Skipped(name, f"its label is blank in the labels file {table.path}" if row
                                   else f"not named in the labels file {table.path}"))
            continue
        for field_name, value in ((LABEL_FIELD, None if row.cls is None else str(row.cls)),
                                  (EXTRA_FIELD, None if row.extra is None else json.dumps(row.extra, ensure_ascii=False))):
            if value is None:
                continue
            if field_name in sample:
                raise ConfigError(
                    f"sample {key!r} already has a {field_name!r} field, and the labels file adds one",
                    key=key, fix=f"exclude the .{field_name} files or drop --labels",
                )
            data = value.encode("utf-8")
            sample[field_name] = SourceFile(field_name, "", len(data), data)
    return unmatched


def plan_shards(samples: list[PlannedSample], shard_size: int, align: int) -> list[list[PlannedSample]]:
    """Greedy, deterministic split into shards of at most ``shard_size`` bytes.

    A sample is never split; a sample larger than ``shard_size`` gets a shard
    of its own (the only case where a shard exceeds the target).
    """
    capacity = shard_size - len(END_OF_ARCHIVE)
    shards: list[list[PlannedSample]] = []
    current: list[PlannedSample] = []
    used = 0
    for sample in samples:
        need = sample.bound(align)
        if current and used + need > capacity:
            shards.append(current)
            current, used = [], 0
        current.append(sample)
        used += need
    if current:
        shards.append(current)
    return shards
