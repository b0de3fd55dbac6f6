"""Read an annotation file that names the files of a flat folder: labels for ``pack``.

Users keep labels beside their images in one of three shapes; each becomes a
:class:`LabelTable`, one :class:`Row` per file it names:

``.csv`` / ``.tsv``
    A header row, then one row per file. The file column is the first column
    named ``filename``, ``file_name``, ``file``, ``path``, ``image``, ``img`` or
    ``name`` (else the first column).
``.jsonl``
    One JSON object per line; the file is the first of the same keys.
``.json``
    COCO (``images``, ``annotations``, ``categories``): every image's
    annotations (boxes, segmentations, any number, possibly none) go with it;
    or a list of objects as in ``.jsonl``; or an object ``{file: label}``.

The *label* is the value under the first key named ``label``, ``class``,
``category``, ``target`` or ``cls`` (the only other column when a CSV has
two), or under the column ``label_column`` names (``pack --label-column breed``).
A CSV whose other columns are all 0/1 with exactly one 1 per row (one-hot, as
Kaggle's plant-pathology ``image_id,healthy,multiple_diseases,rust,scab`` and
ISIC's ``image,MEL,NV,...`` with ``1.0``/``0.0`` write them) gives ``cls`` = the
index of the row's 1 and the column names, in the table's order, as the
classes; ``label_column="a,b,c"`` names such columns when others sit beside
them. A CSV of three or more columns with none of these is refused (naming its
columns) rather than packed without a ``cls``; ``label_column="none"`` packs it
so, every column into ``json``. When every row's label is an integer (or a CSV cell of digits) it is the
sample's ``cls`` as written; when the labels are names, ``cls`` is the index
of the name in the sorted list of names, which goes into the manifest as the
classes (as ``--labels from-folder`` does). Labels ``1.0``/``0.0`` (pandas writes
an integer column with a blank so) count as integers, and integers mixed with names
(``3``, ``cat``) as names. A label that is a list (multi-label; in a CSV, space-separated
class ids such as ``16 0``) or a fraction (a
regression target) gives no ``cls``; when a table has such
labels, :attr:`LabelTable.note` says so and ``pack`` prints it. A row whose label is
blank (an empty cell, ``NaN``, ``null``, a missing key) while other rows have one
gives its file no sample: pack skips and lists it (``Row.blank``), and the classes
come from the labelled rows (before, a blank cell became a class named ``""`` and a
manifest that no reader would open). Every other value of a row (and, for
COCO, the image's record with its ``annotations`` and each annotation's
``category_name``) goes into one ``json`` field, numbers of CSV cells parsed.

A table entry matches a file by its path below SRC (``dogs/1.jpg``) or, when
the entry is a bare name, by the file name wherever it lies (two such files is
an error naming both). A path that runs through the source folder (``train/dogs/1.jpg``
or ``/data/train/dogs/1.jpg`` when packing ``train/``, as tables written at a dataset's
root spell them) is matched by the part below it. Names compare in Unicode NFC, so
a table typed on any system matches files unpacked on a Mac (which stores ``é`` decomposed). An entry that matches no file name is tried as the name
without its extension, as Kaggle's tables write ids (``id,breed`` with
``000bec180eb18c7604dcecc8fe0dba07`` for ``000bec180eb18c7604dcecc8fe0dba07.jpg``),
under the same rules, and last in another letter case (``x.jpg`` for ``x.JPG``, as a
table typed on Windows or macOS, whose file systems ignore case, may spell it). A ``.csv`` whose header is split by ``;``, a tab or ``|``
rather than commas (a spreadsheet saved in a locale that writes decimal commas) is
read with that delimiter. Bounded: a file over :data:`MAX_TABLE_BYTES` is refused
before it is read.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from feedline.errors import ConfigError

FILE_KEYS = ("filename", "file_name", "file", "path", "image", "img", "name")
LABEL_KEYS = ("label", "class", "category", "target", "cls")
SUFFIXES = (".csv", ".tsv", ".jsonl", ".json")
MAX_TABLE_BYTES = 2 << 30
_FIX = ("give a CSV/TSV with a header (filename,label), a JSONL of objects with a "
        "'file_name' key, or a COCO annotations.json")


Record = tuple[str, Any, dict[str, Any]]
"""One table entry: the file name as written, its label (or None) and the rest of its row."""


@dataclass(frozen=True)
class Row:
    """What the table says about one file: its ``cls`` value (or None) and its ``json``
    value (or None: nothing else)."""

    cls: int | None
    extra: Any = None
    blank: bool = False
    """The table gives this file no label (a blank cell, NaN, null, a missing key) while
    other rows have one: pack skips the file and lists it."""


@dataclass(frozen=True)
class LabelTable:
    """File name (as the table spells it) -> :class:`Row`, and the class names when the
    labels were names (index = ``cls``)."""

    path: str
    rows: Mapping[str, Row]
    classes: tuple[str, ...] | None
    note: str | None = None
    """Why the table gave no ``cls`` although it has labels (for pack's notes)."""

    def match(self, names: Iterable[str], roots: Iterable[str] = ()) -> tuple[dict[str, Row], list[str]]:
        """Rows for the walked file ``names``: (name -> row, table entries no file matched).

        ``roots``: the names of the source folders; an entry that spells its path through
        one (``train/dogs/1.jpg`` or ``/data/train/dogs/1.jpg`` for source ``train/``) is
        matched by the rest of its path (``dogs/1.jpg``).

        Raises:
            ConfigError: a bare entry that two files of the walk share the name of.
        """
        names = list(names)
        exact = {nfc(n): n for n in names}  # a Mac writes names decomposed (NFD), tables NFC
        by_base: dict[str, list[str]] = {}
        by_stem: dict[str, list[str]] = {}  # path or bare name minus the extension -> files
        for name in names:
            key = nfc(name)
            base = key.rsplit("/", 1)[-1]
            by_base.setdefault(base, []).append(name)
            if "." in base:
                by_stem.setdefault(key.rsplit(".", 1)[0], []).append(name)
                if "/" in key:
                    by_stem.setdefault(base.rsplit(".", 1)[0], []).append(name)
        folded: dict[str, list[str]] = {}  # a table typed on Windows or macOS: x.jpg for x.JPG
        for name in names:
            key = nfc(name).casefold()
            folded.setdefault(key, []).append(name)
            if "/" in key:
                folded.setdefault(key.rsplit("/", 1)[-1], []).append(name)
        found: dict[str, Row] = {}
        unmatched: list[str] = []
        markers = [nfc(r).strip("/") + "/" for r in roots if r.strip("/") not in ("", ".", "..")]
        for entry, row in self.rows.items():
            norm = nfc(entry.replace("\\", "/"))
            while norm.startswith("./"):
                norm = norm[2:]
            if norm not in exact and "/" in norm:
                norm = _below_root(norm, markers)
            if norm in exact:
                found[exact[norm]] = row
                continue
            hits = by_base.get(norm, []) if "/" not in norm else []
            if not hits:
                hits = [h for h in by_stem.get(norm, [])
                        if "/" not in norm or nfc(h).rsplit(".", 1)[0] == norm]
            if not hits:  # the same name in another case (case-insensitive file systems)
                hits = [h for h in folded.get(norm.casefold(), [])
                        if "/" not in norm or nfc(h).casefold() == norm.casefold()]
            if len(hits) > 1:
                raise ConfigError(
                    f"{self.path}: entry {entry!r} matches {len(hits)} files: {', '.join(hits[:3])}",
                    path=self.path, fix="write the path below SRC in the labels file (dogs/1.jpg)",
                )
            if hits:
                found[hits[0]] = row
            else:
                unmatched.append(entry)
        return found, unmatched


def nfc(text: str) -> str:
    """``text`` in Unicode NFC: ``café`` typed (one code point for é) and ``café`` as macOS
    stores file names (e + a combining accent) compare equal."""
    return text if text.isascii() else unicodedata.normalize("NFC", text)


def _below_root(path: str, markers: list[str]) -> str:
    """``path`` less everything up to a source folder's name (``"train/"`` in ``markers``):
    ``train/dogs/1.jpg`` and ``/data/train/dogs/1.jpg`` -> ``dogs/1.jpg``; else ``path``."""
    for marker in markers:
        if path.startswith(marker):
            return path[len(marker):]
        at = path.rfind("/" + marker)
        if at >= 0:
            return path[at + 1 + len(marker):]
    return path


def _first(keys: Iterable[str], wanted: tuple[str, ...]) -> str | None:
    lowered = {k.lower(): k for k in keys}
    return next((lowered[w] for w in wanted if w in lowered), None)


def _cell(text: str) -> Any:
    """A CSV cell as a number when it is one, else the text."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _records_csv(text: str, delimiter: str, path: str,
                 label_column: str | None = None) -> tuple[list[Record], tuple[str, ...] | None]:
    """The rows of a CSV/TSV, and the class order when its label is one-hot columns."""
    reader = csv.reader(io.StringIO(text), delimiter=delimiter)
    header = next(reader, None)
    if not header or len(header) < 2:
        raise ConfigError(f"{path}: needs a header row with a file column and a label column", path=path, fix=_FIX)
    body = list(reader)
    _no_header(header, next((r for r in body if r), None), path, delimiter)
    twice = sorted({h for h in header if header.count(h) > 1})
    if twice:  # csv would keep one of the two cells silently
        raise ConfigError(f"{path}: the header names column {twice[0]!r} twice", path=path,
                          fix="give every column its own name")
    file_col = header.index(_first(header, FILE_KEYS) or header[0])
    others = [h for i, h in enumerate(header) if i != file_col]
    rows = []
    for line, cells in enumerate(body, start=2):
        if not cells or all(not c.strip() for c in cells):
            continue
        if len(cells) != len(header):
            raise ConfigError(f"{path}: line {line} has {len(cells)} cells, the header {len(header)}",
                              path=path, fix="quote cells that hold the delimiter")
        values = {h: _cell(c) for i, (h, c) in enumerate(zip(header, cells, strict=True)) if i != file_col}
        rows.append((cells[file_col], values))
    label_names = _label_columns(others, [v for _, v in rows], path, label_column)

    if len(label_names) > 1:  # one-hot: the label is the name of the row's column holding the 1
        out = []
        for name, values in rows:
            if not _one_hot(values, label_names):
                several = sum(values.get(c) == 1 for c in label_names) > 1
                raise ConfigError(
                    f"{path}: the row of {name!r} does not hold exactly one 1 in the one-hot label columns "
                    f"{', '.join(label_names)}" + (" (several 1s: a multi-label table)" if several else ""),
                    path=path, field="label_column", fix=_MULTI_FIX if several else
                    "give every row one 1 (one class per file), or name one label column with "
                    "--label-column NAME (--label-column none: no cls, every column into json)")
            label = next(c for c in label_names if values[c] == 1)
            out.append((name, label, {k: v for k, v in values.items() if k not in label_names}))
        return out, tuple(label_names)
    return [(name, values.pop(label_names[0]) if label_names else None, values) for name, values in rows], None


def _shape(text: str) -> str:
    """Letters as ``a``, digits as ``9``, the rest kept: ``LJ001-0001`` -> ``aa999-9999``."""
    return "".join("a" if c.isalpha() else "9" if c.isdigit() else c for c in text.strip())


def _no_header(header: list[str], first: list[str] | None, path: str, delimiter: str) -> None:
    """Refuse a table whose first row is data (LJSpeech's ``metadata.csv`` has no header): no
    cell names a known column and its first cell is shaped like the next row's ``first``
    (before: "the header names column ... twice", or "line 2 has 1 cells")."""
    names = {h.strip().lower() for h in header}
    if names & {*FILE_KEYS, *LABEL_KEYS} or not first or not any(c.isdigit() for c in header[0]) \
            or _shape(first[0]) != _shape(header[0]):
        return
    row = delimiter.join(["file", *(f"column{i}" for i in range(2, len(header) + 1))])
    raise ConfigError(
        f"{path}: the first row looks like data, not a header: {header[0]!r} is shaped like "
        f"{first[0]!r} below it, and pack reads the first row as the column names", path=path,
        fix=f"add a header row naming the columns, e.g. {row!r} (then --label-column column2, or "
            "--label-column none for every column in json)")


_MULTI_FIX = ("multi-label (several 1s a row) or float targets: --label-column none keeps every column in "
              "'json'; at load time feedline.table.Columns(['a', 'b', ...]) makes them one float32 array "
              "per sample and ds.column('fold') selects a CV fold (docs/loading.md, 'A Kaggle table')")


def _one_hot(values: Mapping[str, Any], columns: list[str]) -> bool:
    """Whether the row's ``columns`` hold 0s and exactly one 1 (``1.0``/``0.0`` alike)."""
    cells = [values.get(c) for c in columns]
    return all(v in (0, 1) and not isinstance(v, bool) for v in cells) and cells.count(1) == 1


def _label_columns(others: list[str], rows: list[dict[str, Any]], path: str,
                   label_column: str | None) -> list[str]:
    """The label column(s) of a CSV whose non-file columns are ``others``: one name, several
    (one-hot), or none (``label_column="none"``)."""
    if label_column is not None:
        if label_column.strip().lower() == "none":
            return []
        wanted = [c.strip() for c in label_column.split(",") if c.strip()]
        lowered = {h.lower(): h for h in others}
        missing = [c for c in wanted if c.lower() not in lowered]
        if missing or not wanted:
            raise ConfigError(f"{path}: no column {', '.join(map(repr, missing or [label_column]))}; its columns "
                              f"other than the file column are {', '.join(others)}", path=path,
                              field="label_column", fix="name one of those columns with --label-column")
        return [lowered[c.lower()] for c in wanted]
    known = _first(others, LABEL_KEYS)
    if known is not None:
        return [known]
    if len(others) == 1:
        return others
    if rows and all(_one_hot(r, others) for r in rows):
        return others
    raise ConfigError(f"{path}: which column is the label? None of {', '.join(others)} is named "
                      f"{'/'.join(LABEL_KEYS)}, and they are not one-hot (0/1, one 1 per row)", path=path,
                      field="label_column", fix="name it: pack --label-column COLUMN (one-hot columns: "
                      "--label-column A,B,C); " + _MULTI_FIX)


def _record(obj: Any, where: str, path: str) -> tuple[str, Any, dict[str, Any]]:
    if not isinstance(obj, dict):
        raise ConfigError(f"{path}: {where} is not an object", path=path, fix=_FIX)
    file_key = _first(obj, FILE_KEYS)
    if file_key is None or not isinstance(obj[file_key], str):
        raise ConfigError(f"{path}: {where} has no file name (a key of {', '.join(FILE_KEYS)})",
                          path=path, fix=_FIX)
    rest = {k: v for k, v in obj.items() if k != file_key}
    label_key = _first(rest, LABEL_KEYS)
    label = rest.pop(label_key) if label_key is not None else None
    return obj[file_key], label, rest


def _records_coco(doc: dict[str, Any], path: str) -> list[tuple[str, Any, dict[str, Any]]]:
    images, anns = doc.get("images"), doc.get("annotations", [])
    if not isinstance(images, list) or not isinstance(anns, list):
        raise ConfigError(f"{path}: COCO 'images' and 'annotations' must be lists", path=path, fix=_FIX)
    names = {c.get("id"): c.get("name") for c in doc.get("categories", []) if isinstance(c, dict)}
    per_image: dict[Any, list[Any]] = {}
    for ann in anns:
        if isinstance(ann, dict):
            if ann.get("category_id") in names:
                ann = {**ann, "category_name": names[ann["category_id"]]}
            per_image.setdefault(ann.get("image_id"), []).append(ann)
    out = []
    for n, img in enumerate(images):
        name, _, rest = _record(img, f"images[{n}]", path)
        out.append((name, None, {**rest, "annotations": per_image.get(img.get("id"), [])}))
    return out


def _records(path: Path, text: str, label_column: str | None) -> tuple[list[Record], tuple[str, ...] | None]:
    """The table's entries, and the class order when its columns fix one (one-hot CSV)."""
    suffix = path.suffix.lower()
    where = str(path)
    if suffix in (".csv", ".tsv"):
        return _records_csv(text, _delimiter(text, "\t" if suffix == ".tsv" else ","), where, label_column)
    if label_column is not None:
        raise ConfigError(f"--label-column: applies to a .csv/.tsv table, not {where}", path=where,
                          field="label_column", fix="drop --label-column; JSON tables use the key 'label'")
    return _records_json(suffix, text, where), None


def _records_json(suffix: str, text: str, where: str) -> list[Record]:
    try:
        if suffix == ".jsonl":
            objs = [(n, json.loads(line)) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
        else:
            doc = json.loads(text)
    except ValueError as e:
        raise ConfigError(f"{where}: not valid JSON: {e}", path=where, fix=_FIX) from None
    if suffix == ".jsonl":  # outside the try: _record's ConfigError is a ValueError too
        return [_record(obj, f"line {n}", where) for n, obj in objs]
    if isinstance(doc, dict) and "images" in doc:
        return _records_coco(doc, where)
    if isinstance(doc, list):
        return [_record(obj, f"item {n}", where) for n, obj in enumerate(doc)]
    if isinstance(doc, dict):
        return [(str(k), v, {}) for k, v in doc.items()]
    raise ConfigError(f"{where}: a JSON list or object was expected", path=where, fix=_FIX)


def _delimiter(text: str, default: str) -> str:
    """The delimiter of a CSV/TSV: ``default`` when it splits the first rows into one number
    (2 or more) of cells; else the first of ``,``, ``;``, tab and ``|`` that does (LJSpeech's
    ``LJ001-0001|Printing, in the only sense|...``: commas in the text split only some rows;
    before, the first row's two commas chose the comma); else ``default`` when it splits the
    first row, else the delimiter that splits the first row into the most cells."""
    head = text[:65536]
    cut = len(text) > len(head)
    for d in (default, ",", ";", "\t", "|"):
        rows = [r for r in csv.reader(io.StringIO(head), delimiter=d) if r][:50]
        rows = rows[:-1] if cut and len(rows) > 1 else rows  # the cut may end a row early
        if rows and len(rows[0]) >= 2 and all(len(r) == len(rows[0]) for r in rows):
            return d
    header = next(csv.reader(io.StringIO(head), delimiter=default), [])
    if len(header) >= 2:
        return default
    first = head.split("\n", 1)[0]
    counts = {d: len(next(csv.reader([first], delimiter=d), [])) for d in (",", ";", "\t", "|")}
    best = max(counts, key=lambda d: counts[d])
    return best if counts[best] >= 2 else default


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -(1 << 63) <= value < (1 << 63)


def read_table(path: str | os.PathLike[str], classes: tuple[str, ...] | None = None,
               label_column: str | None = None) -> LabelTable:
    """Read the annotation file at ``path`` (see the module docstring).

    Args:
        classes: the class names in label order (another split's) for name labels; None:
            the sorted names the file holds (a one-hot CSV: its columns' order).
        label_column: a CSV's label column, several comma-separated one-hot columns, or
            ``"none"``; None: found by name, or one-hot columns, else refused.

    Raises:
        ConfigError: a missing, oversized, unreadable or malformed file, an unknown suffix,
            one file named twice, or a class name not in ``classes``.
    """
    p = Path(path).expanduser()
    given = classes
    if p.suffix.lower() not in SUFFIXES:
        raise ConfigError(f"--labels {str(p)!r}: must be from-folder or a labels file",
                          fix=f"use from-folder, or a file ending in {', '.join(SUFFIXES)}")
    try:
        if p.stat().st_size > MAX_TABLE_BYTES:
            raise ConfigError(f"{p}: larger than {MAX_TABLE_BYTES >> 30} GiB", path=str(p),
                              fix="split the labels file")
        text = p.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read labels file {str(p)!r}: {e}", path=str(p),
                          fix="give a readable UTF-8 file") from None
    records, order = _records(p, text, label_column)
    blank = {name for name, label, _ in records if _blank(label)}
    if len(blank) == len(records):  # no labels at all (--label-column none, a table of metadata)
        blank = set()
        records = [(name, None, rest) for name, _, rest in records]  # an empty cell is no class named ""
    records = [r for r in records if r[0] not in blank]
    records = _as_classes([label for _, label, _ in records], records)
    records, tagged = _id_tags(records)
    labels = [label for _, label, _ in records]
    ints = all(_is_int(v) for v in labels) and order is None
    names = all(isinstance(v, str) for v in labels)
    classes = (order or tuple(sorted(set(labels)))) if names and not ints and labels else None
    if classes is not None and given is not None:
        unknown = [c for c in classes if c not in given]
        if unknown:
            raise ConfigError(f"{p}: class name(s) {', '.join(map(repr, unknown[:5]))} are not in the given "
                              f"class list ({len(given)} classes)", path=str(p),
                              fix="pass the class list of the split that has every class to --classes")
        classes = given
    number = {c: i for i, c in enumerate(classes or ())}
    rows: dict[str, Row] = {}
    for name, label, rest in records:
        if name in rows:
            raise ConfigError(f"{p}: file {name!r} is named twice", path=str(p),
                              fix="give one row per file (a list of labels for multi-label)")
        cls = label if ints else number.get(label) if classes is not None else None
        extra = dict(rest)
        if cls is None and label is not None:
            extra["label"] = label
        rows[name] = Row(cls, extra or None)
    for name in blank:
        if name in rows:
            raise ConfigError(f"{p}: file {name!r} is named twice", path=str(p),
                              fix="give one row per file (a list of labels for multi-label)")
        rows[name] = Row(None, None, blank=True)
    odd = [v for v in labels if v is not None]
    note = _tags_note(p, labels) if classes is not None else None
    if tagged:
        note = (f"{p}: its labels are space-separated class ids ({tagged}...), a multi-label table, so no "
                "sample has a cls field; each one's json holds its ids as a list under 'label' "
                "(make the multi-hot target from it in collate=)")
    elif odd and not ints and classes is None:
        shown = ", ".join(repr(v) for v in list(dict.fromkeys(map(str, odd)))[:4])
        note = (f"{p}: its labels ({shown}...) are neither class ids nor class names in every row, "
                "so no sample has a cls field; each one's json holds its value under 'label'")
    return LabelTable(str(p), rows, classes, note)


def _id_tags(records: list[Record]) -> tuple[list[Record], str]:
    """Space-separated class ids (Kaggle's multi-label tables: the Human Protein Atlas'
    ``Id,Target`` with ``16 0``, iMet's ``attribute_ids``) as lists of ints, and a few of
    them as written (``""``: not such a table, records unchanged). Every label must be ids
    and one at least two of them; names are never split (``tiger shark`` is one class)."""
    labels = [label for _, label, _ in records]
    if not labels or not all(_is_int(v) or isinstance(v, str) for v in labels):
        return records, ""
    parts = [str(v).split() for v in labels]
    if not any(len(t) > 1 for t in parts) or not all(t and all(x.isdigit() for x in t) for t in parts):
        return records, ""
    shown = ", ".join(repr(str(v)) for v in list(dict.fromkeys(v for v in labels if " " in str(v)))[:3])
    return [(n, [int(x) for x in t], rest) for (n, _, rest), t in zip(records, parts, strict=True)], shown


def _tags_note(p: Path, labels: list[Any]) -> str | None:
    """A note when class names look like space-separated tags (Planet's ``haze primary``):
    some name holds several words and the names hold fewer distinct words than names.
    They stay class names (``tiger shark`` is one class); the note says how to split them."""
    names = {v for v in labels if isinstance(v, str)}
    words = {w for v in names for w in v.split()}
    if not any(len(v.split()) > 1 for v in names) or len(words) >= len(names):
        return None
    shown = ", ".join(repr(v) for v in sorted((v for v in names if " " in v), key=len, reverse=True)[:3])
    return (f"{p}: {len(names)} class names made of {len(words)} words ({shown}...): packed as {len(names)} "
            "classes; if they are space-separated tags of a multi-label table, split the class name "
            "(read_manifest(ds).classes[cls].split()) into a multi-hot target in collate=")


def _blank(label: Any) -> bool:
    """No label: a blank CSV cell, NaN (pandas' missing value), JSON null or a missing key."""
    return label is None or (isinstance(label, str) and not label.strip()) or (
        isinstance(label, float) and math.isnan(label))


def _as_classes(labels: list[Any], records: list[Record]) -> list[Record]:
    """Labels as the spreadsheet meant them: ``1.0``/``0.0`` (pandas writes an integer
    column holding a blank so) as integers; ids mixed with names (``3``, ``cat``) as
    names, as written. Others (``0.37``, a list, a blank) unchanged."""
    if labels and all((isinstance(v, float) and v.is_integer()) or _is_int(v) for v in labels):
        return [(n, int(v), rest) for (n, _, rest), v in zip(records, labels, strict=True)]
    if labels and all(_is_int(v) or isinstance(v, str) for v in labels) and any(isinstance(v, str) for v in labels):
        return [(n, str(v), rest) for (n, _, rest), v in zip(records, labels, strict=True)]
    return records
