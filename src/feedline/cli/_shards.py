"""``feedline pack | index | inspect | verify``: build and check shard datasets.

``pack`` turns folders of small files into tar shards with an index and a
manifest (progress bar with files/s and MB/s); ``index`` adopts existing
WebDataset tars; ``inspect`` summarises a dataset; ``verify`` checks every
checksum and exits 1 naming the shard, key and field of each mismatch.
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import click
import typer

from feedline.cli._examples import epilog
from feedline.cli._output import (
    JSON_HELP,
    check_exists,
    check_json_dest,
    json_option,
    printable,
    to_stdout,
    write_json,
)
from feedline.units import format_bytes, parse_bytes

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, Task
    from rich.text import Text

    from feedline.format import Manifest, PackProgress


def _console() -> Console:
    from rich.console import Console

    return Console(stderr=True)


def _files_column() -> Any:
    from rich.progress import ProgressColumn
    from rich.text import Text

    class FilesColumn(ProgressColumn):
        """``1234/5000 files 2,100 files/s`` from the task's ``files`` fields."""

        def render(self, task: Task) -> Text:
            files = task.fields.get("files", 0)
            elapsed = task.elapsed or 0.0
            rate = files / elapsed if elapsed > 0 else 0.0
            return Text(f"{files}/{task.fields.get('files_total', 0)} files {rate:,.0f} files/s")

    return FilesColumn()


def _pack_progress(console: Console) -> Progress:
    from rich.progress import (
        BarColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(bar_width=24),
        TextColumn("{task.fields[shards]}"),
        _files_column(),
        TransferSpeedColumn(),
        TimeRemainingColumn(compact=True),
        console=console,
        transient=False,
    )


def _summary(manifest: Manifest, out: str, seconds: float, nbytes: int, files: int) -> str:
    total = sum(s.size for s in manifest.shards)
    per_s = files / seconds if seconds > 0 else 0.0
    shown = f"{per_s:,.0f}" if per_s >= 10 else f"{per_s:.2g}"  # 4 files in 23 s: 0.17, not 0
    rate = f"{shown} files/s, {nbytes / seconds / 1e6:,.1f} MB/s" if seconds > 0 else ""
    classes = f", {len(manifest.classes)} classes" if manifest.classes is not None else ""
    return (
        f"packed {manifest.num_samples} samples ({files} files{classes}) into {len(manifest.shards)} "
        f"shard(s), {format_bytes(total)}, in {seconds:.2f} s ({rate}) -> {Path(out) / 'manifest.json'}"
    )


_TINY_SHARD = 1 << 20


def _shard_size(text: str, warn: Callable[[str], None]) -> int:
    """``--shard-size``: a bare number below 1 MiB is refused (``10`` is 10 bytes, one
    sample per shard); a tiny size with a unit is allowed with a warning."""
    size = parse_bytes(text, name="--shard-size")
    if size <= 0:
        raise typer.BadParameter(f"{text!r}: must be a positive size", param_hint="--shard-size")
    if size < _TINY_SHARD:
        if text.strip().isdigit():
            raise typer.BadParameter(
                f"{text!r} is {size} bytes: every shard would hold about one sample. Give a unit, e.g. "
                f"{text.strip()}MiB or {text.strip()}GiB (shards of 256MiB-2GiB suit most data)",
                param_hint="--shard-size",
            )
        warn(f"--shard-size {text} is below 1 MiB: expect many small shards (256MiB-2GiB suit most data)")
    return size


def _classes_of(dataset: Path) -> tuple[str, ...]:
    """``--classes``: the class list in the manifest of ``dataset`` (a bad argument if none)."""
    from feedline.errors import FeedlineError
    from feedline.format import read_manifest

    check_exists(dataset, "dataset", "--classes")
    try:
        classes = read_manifest(dataset).classes
    except FeedlineError as e:
        raise typer.BadParameter(f"{str(dataset)!r}: {e.message}", param_hint="--classes") from None
    if classes is None:
        raise typer.BadParameter(f"dataset {str(dataset)!r} has no class list (it was packed without "
                                 "--labels)", param_hint="--classes")
    return tuple(classes)


class _LazyBar:
    """The pack progress bar, drawn only once pack reports progress: argument and
    source errors (found while planning) print before any bar."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.bar: Progress | None = None
        self.task: Any = None
        self.last = 0.0

    def report(self, p: PackProgress) -> None:
        now = time.perf_counter()
        if self.bar is None:
            self.bar = _pack_progress(self.console)
            self.bar.start()
            self.task = self.bar.add_task("packing", total=None, files=0, files_total=0, shards="")
        elif now - self.last < 0.05 and p.files_done < p.files_total:
            return  # a redraw per sample would cost more than packing it
        self.last = now
        self.bar.update(
            self.task, total=p.bytes_total, completed=p.bytes_done, files=p.files_done,
            files_total=p.files_total,
            shards=f"shard {p.shards_done}/{p.shards_total}" + (f" ({p.shards_reused} reused)" if p.shards_reused else ""),
        )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def pack_cmd(
    src: Annotated[list[Path], typer.Argument(metavar="SRC...", help="folders of files, or list files with one path per line")],
    out: Annotated[Path | None, typer.Option("--out", "-o", help="output folder for shards, indexes and manifest.json (required; may lie inside SRC: it is left out; may not be SRC)")] = None,
    labels: Annotated[str | None, typer.Option("--labels", metavar="from-folder|FILE", help="from-folder: an ImageFolder tree SRC/<class>/...: each image gets an integer 'cls' (its class folder's index in sorted order, as torchvision numbers them) and the class list goes into the manifest; packs image files only unless --include is given. FILE (.csv/.tsv with a header 'filename,label', .jsonl of objects with a 'file_name', or a COCO annotations.json): packs the files it names, each with 'cls' (class names are numbered in sorted order and listed in the manifest) and a 'json' field with the rest of its row (COCO: the image's boxes). Both imply --key file")] = None,
    label_column: Annotated[str | None, typer.Option("--label-column", metavar="COLUMN", help="with --labels FILE.csv: its label column when none is named label/class/category/target/cls (Kaggle's id,breed,...); several comma-separated: one-hot columns (cls = the column holding the 1, classes in column order; found without this option when every other column is one-hot); none: no cls, every column into json")] = None,
    class_depth: Annotated[int, typer.Option("--class-depth", metavar="N", help="with --labels from-folder: how many folder levels name the class; 1 (default, as torchvision's ImageFolder): SRC/<class>/.../<image>; 2: SRC/<group>/<class>/<image>, classes named group/class")] = 1,
    classes: Annotated[Path | None, typer.Option("--classes", metavar="DATASET", help="take the class list (label numbers) from another packed dataset, e.g. pack val/ with --classes data/train, so a split that misses a class folder keeps the same numbers; a class not in that list is an error")] = None,
    key: Annotated[str | None, typer.Option("--key", metavar="webdataset|file|folder|parallel|episode", help="how names become samples. webdataset (default): the key runs to the first dot of the file name, so 000123.cam0.jpg + 000123.json are one sample. file (default with --labels): each file is a sample keyed by its path minus the final extension, so IMG_2023.01.05.jpg is safe (stored as IMG_2023%2E01%2E05.jpg in the tar for WebDataset readers; __key__ gives IMG_2023.01.05). folder: each folder is a sample and its files are the fields, so clip_0001/frame_000.jpg ... frame_015.jpg is one sample of 16 frames. parallel: the top folders name the fields, so images/x.jpg + masks/x.png are fields images.jpg and masks.png of sample x. episode: recorded episodes SRC/<episode>/<sensor>/<frame>.* + per-episode .npy of one row per frame (robot and driving logs): one sample per frame keyed <episode>/<frame>, a field per sensor and per array (feedline.episodes.pack; read windows with feedline.episodes.Windows)")] = None,
    raw: Annotated[list[str] | None, typer.Option("--raw", metavar="SENSOR:DTYPE:COLUMNS", help="with --key episode: store a sensor's raw binary files as arrays of COLUMNS columns, e.g. --raw lidar:f4:4 makes each lidar/*.bin an N x 4 float32 lidar.npy (repeatable)")] = None,
    include: Annotated[list[str] | None, typer.Option("--include", metavar="GLOB", help="pack only files matching a glob (repeatable); a pattern without / matches the file name, with / the path below SRC")] = None,
    exclude: Annotated[list[str] | None, typer.Option("--exclude", metavar="GLOB", help="leave out files matching a glob (repeatable), e.g. --exclude '*.txt' --exclude 'scratch/*'")] = None,
    follow_symlinks: Annotated[bool, typer.Option("--follow-symlinks", help="follow symbolic links that lead outside SRC (by default they are skipped and listed)")] = False,
    shard_size: Annotated[str, typer.Option("--shard-size", help="target shard size with a unit (samples are never split), e.g. 512MiB, 1GiB")] = "1GiB",
    align: Annotated[int, typer.Option("--align", help="pad so each sample's first byte is on this boundary (0 = off; 4096 for O_DIRECT/GDS)")] = 0,
    workers: Annotated[int, typer.Option("--workers", "-j", help="threads that read and checksum files (output order is preserved)")] = 1,
    checksum: Annotated[str, typer.Option("--checksum", help="checksum algorithm: xxh3 or crc32c (needs the crc32c package)")] = "xxh3",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress bar")] = False,
    no_fsync: Annotated[bool, typer.Option("--no-fsync", help="skip fsync (scratch copies): still atomic if the run is killed, but a power loss may leave shards incomplete")] = False,
    json_dest: Annotated[str | None, json_option(JSON_HELP + ": the manifest written")] = None,
) -> None:
    """Pack small files into tar shards with a binary index and an atomic manifest.

    Files that fit no rule (no extension, not in a class folder, dangling or
    outside links) are skipped and listed; a rerun reuses a shard only if every
    source's checksum still matches it.
    """
    from feedline.format import SourceRules, pack

    console = _console()

    def warn(line: str) -> None:
        console.print(f"feedline: warning: {printable(line)}", markup=False, highlight=False)

    check_json_dest(json_dest)
    if out is None:
        raise click.UsageError(_no_out(src))
    src, out = [p.expanduser() for p in src], out.expanduser()
    for path in src:
        check_exists(path, "source", "SRC")
    size = _shard_size(shard_size, warn)
    if key == "episode" or raw:
        _pack_episodes(src, out, key, raw or [], size, quiet or to_stdout(json_dest), json_dest, warn,
                       given=[n for n, v in (("--labels", labels), ("--include", include), ("--exclude", exclude),
                                              ("--classes", classes)) if v])
        return
    class_list = _classes_of(classes) if classes is not None else None
    rules = SourceRules(key=key, labels=labels, include=tuple(include or ()), exclude=tuple(exclude or ()),
                        follow_symlinks=follow_symlinks, classes=class_list,
                        label_column=label_column, class_depth=class_depth)
    start = time.perf_counter()
    bar = _LazyBar(console)
    last: list[PackProgress] = []

    def report(p: PackProgress) -> None:
        last[:] = [p]
        if not (quiet or to_stdout(json_dest)):
            bar.report(p)

    try:
        manifest = pack(src, out, shard_size=size, align=align, workers=workers, checksum_algo=checksum,
                        progress=report, durable=not no_fsync, rules=rules, warn=warn)
    finally:
        bar.close()
    seconds = time.perf_counter() - start
    # source files, not members: the ``cls`` that --labels adds to each sample is no file
    files = last[0].files_total if last else sum(int(f["count"]) for f in manifest.fields.values())
    nbytes = sum(int(f["total_bytes"]) for f in manifest.fields.values())
    write_json(manifest.to_json(), json_dest)
    if not to_stdout(json_dest):
        print(_summary(manifest, str(out), seconds, nbytes, files))


def _pack_episodes(src: list[Path], out: Path, key: str | None, raw: list[str], size: int, quiet: bool,
                   json_dest: str | None, warn: Callable[[str], None], given: list[str]) -> None:
    """``--key episode``: :func:`feedline.episodes.pack` of one folder of recorded episodes."""
    from feedline import episodes
    from feedline.format import read_manifest

    if key != "episode":
        raise click.UsageError("--raw goes with --key episode (a sensor's raw files of recorded episodes)")
    if len(src) != 1 or given:
        raise click.UsageError(f"--key episode packs one folder of episode folders, without {', '.join(given)}"
                               if given else "--key episode packs one folder of episode folders; pack them one by one")
    rows: dict[str, tuple[str, int]] = {}
    for spec in raw:
        sensor, _, rest = spec.partition(":")
        dtype, _, cols = rest.partition(":")
        if not sensor or not dtype or not cols.isdigit() or int(cols) < 1:
            raise typer.BadParameter(f"{spec!r}: give SENSOR:DTYPE:COLUMNS, e.g. lidar:f4:4", param_hint="--raw")
        rows[sensor] = (dtype, int(cols))
    start = time.perf_counter()
    summary = episodes.pack(src[0], out, raw=rows, shard_size=size, progress=not quiet)
    for line in summary["skipped"]:
        warn(f"skipped {line}")
    frames = summary["frames"]
    partial = ", ".join(f"{f!r} ({n} of {frames})" for f, n in summary["fields"].items() if n < frames)
    if partial:
        warn(f"field(s) in only some frames: {partial}; feedline.episodes.Windows fills them with zeros "
             "and flags them in <name>_is_pad")
    manifest = read_manifest(out)
    write_json(manifest.to_json(), json_dest)
    if not to_stdout(json_dest):
        print(f"packed {summary['episodes']} episodes, {summary['frames']} frames into {len(manifest.shards)} "
              f"shard(s) in {time.perf_counter() - start:.2f} s -> {out / 'manifest.json'} (+ episodes.json); "
              f"fields: {', '.join(summary['fields'])}")


def _no_out(src: list[Path]) -> str:
    """The missing --out error; when the last SRC looks like the intended output (it does
    not exist, or is an empty folder: ``feedline pack photos/ data/``), the command to use."""
    last = src[-1]
    intended = not last.exists() or (last.is_dir() and not any(last.iterdir()))
    if len(src) < 2 or not intended:
        return "Missing option '--out' / '-o': the output folder (--out DIR)"
    sources = " ".join(shlex.quote(str(p)) for p in src[:-1])
    return (f"Missing option '--out' / '-o'. To pack {sources} into {str(last)!r}: "
            f"feedline pack {sources} --out {shlex.quote(str(last))}")


def index_cmd(
    tars: Annotated[list[Path], typer.Argument(metavar="TAR...", help="existing WebDataset .tar files, in dataset order, or a folder of them (its *.tar in name order); never modified")],
    out: Annotated[Path | None, typer.Option("--out", "-o", help="dataset root for the .idx files and manifest.json (default: the first tar's folder; tars outside it are linked into it)")] = None,
    checksum: Annotated[str, typer.Option("--checksum", help="checksum algorithm: xxh3 or crc32c")] = "xxh3",
    json_dest: Annotated[str | None, json_option(JSON_HELP + ": the manifest written")] = None,
) -> None:
    """Adopt existing tar shards: build their indexes and a manifest without rewriting them."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from feedline.format import index_tars
    from feedline.format._adopt import expand_tars

    check_json_dest(json_dest)
    tars, out = [t.expanduser() for t in tars], None if out is None else out.expanduser()
    for tar in tars:
        check_exists(tar, "tar file", "TARS")
    tars = expand_tars(tars)
    if out is not None and out.exists() and not out.is_dir():
        raise typer.BadParameter(f"{str(out)!r} is a file, not a folder", param_hint="--out")
    columns = (TextColumn("[bold]indexing"), BarColumn(), MofNCompleteColumn())
    console = _console()
    with Progress(*columns, console=console, transient=True,
                  disable=to_stdout(json_dest) or not console.is_terminal) as bar:
        task = bar.add_task("index", total=len(tars))
        manifest = index_tars(tars, out, checksum_algo=checksum, progress=lambda done, _: bar.update(task, completed=done))
    root = out if out is not None else tars[0].parent
    write_json(manifest.to_json(), json_dest)
    if not to_stdout(json_dest):
        print(f"indexed {manifest.num_samples} samples in {len(manifest.shards)} tar(s) -> {root / 'manifest.json'}")


def _inspect_lines(info: dict[str, Any]) -> list[str]:
    a = info["alignment"]
    lines = [
        f"dataset   {info['root']}: {info['num_samples']} samples in {info['num_shards']} shard(s), "
        f"{format_bytes(info['total_bytes'])}",
        f"format    version {info['version']}, checksum {info['checksum_algo']}, "
        f"align {info['align'] or 'off'}",
        f"aligned   {a['aligned_samples']}/{info['num_samples']} samples start on a {a['boundary']}-byte boundary",
        "fields:",
    ]
    for name, f in info["fields"].items():
        lines.append(
            f"  {name:<20} {f['count']:>9} x  {format_bytes(f['total_bytes']):>10} total, "
            f"{f['min_size']}..{f['max_size']} bytes each"
        )
    if info.get("classes") is not None:
        names = info["classes"]
        shown = ", ".join(f"{i}={c}" for i, c in enumerate(names[:20]))
        lines.append(f"classes   {len(names)} (cls label = index): {shown}{', ...' if len(names) > 20 else ''}")
    lines.append("shards:")
    for s in info["shards"]:
        lines.append(
            f"  {s['name']:<24} {s['num_samples']:>8} samples {format_bytes(s['size']):>10}, "
            f"{s['aligned_samples']} aligned"
        )
    return lines


def _dataset_root(root: Path) -> Path:
    """The dataset folder ``root`` names: a ``file:`` URL or its ``manifest.json`` stand for it."""
    text = str(root)
    if text.startswith("file:"):  # a Path folds file:///x into file:/x
        root = Path(text[len("file:"):])
    if root.name == "manifest.json" and root.is_file():
        root = root.parent
    check_exists(root, "dataset folder", "DIR")
    if not root.is_dir():
        raise typer.BadParameter(f"{str(root)!r} is a file; give the dataset folder (it holds manifest.json)", param_hint="DIR")
    return root


def inspect_cmd(
    root: Annotated[Path, typer.Argument(metavar="DIR", help="dataset folder (holds manifest.json)")],
    json_dest: Annotated[str | None, json_option()] = None,
) -> None:
    """Show a dataset's shards, samples, fields, classes, sizes and alignment."""
    from feedline.format import inspect

    check_json_dest(json_dest)
    root = _dataset_root(root)
    info = inspect(root)
    write_json(info, json_dest)
    if not to_stdout(json_dest):
        lines = _inspect_lines(info)
        if "json" in info["fields"]:
            lines.insert(lines.index("shards:"), _json_columns(root))
        print("\n".join(map(printable, lines)))


def _json_columns(root: Path) -> str:
    """The columns of sample 0's ``json`` (a ``pack --labels`` table's other columns), and
    how to get one for every sample."""
    import json

    from feedline.errors import FeedlineError
    from feedline.io import open_dataset

    try:
        with open_dataset(os.fspath(root)) as ds:
            row = json.loads(bytes(ds.read_fields([0], ["json"])[1]["json"][0] or b"null"))
    except (FeedlineError, ValueError) as e:
        return f"columns   sample 0's json does not read: {e}"
    if not isinstance(row, dict):
        return f"columns   sample 0's json is a {type(row).__name__}, not a table row"
    names = ", ".join(list(row)[:20]) + (", ..." if len(row) > 20 else "")
    return f"columns   json of sample 0: {names} (ds.column('{next(iter(row), 'NAME')}') reads one for every sample)"


def _decode_problems(root: Path, on_chunk: Callable[[int], None]) -> tuple[list[dict[str, str]], list[str]]:
    """Decode every sample of the dataset at ``root`` with the loader's default codecs, on
    one thread per usable core: one ``{shard, key, field, error}`` per sample that fails
    (a truncated or empty image, a non-UTF-8 text...), and the fields no codec checks (they
    load as bytes: ``wav``). ``on_chunk(n)`` after each n samples."""
    from concurrent.futures import ThreadPoolExecutor

    from feedline.cores import usable_cores
    from feedline.decode import Decoders
    from feedline.errors import DecodeError
    from feedline.io import open_dataset

    ds = open_dataset(os.fspath(root))
    decoders = Decoders().with_labels(f for f, fs in ds.schema.items() if fs.kind == "label")
    chunk = 256

    def check(lo: int) -> list[dict[str, str]]:
        found = []
        for i, sample in enumerate(ds.read_many(range(lo, min(lo + chunk, len(ds)))), lo):
            for field, data in sample.items():
                if field.startswith("__"):
                    continue
                try:
                    decoders.decode_field(field, data, key=sample["__key__"])
                except DecodeError as e:
                    found.append({"shard": ds.locate(i)[0], "key": str(sample["__key__"]), "field": field,
                                  "error": e.message})
        on_chunk(min(chunk, len(ds) - lo))
        return found

    unchecked = [f for f in ds.fields if not decoders.decodes(f)]
    with ThreadPoolExecutor(max(1, min(usable_cores(), 8))) as pool:
        return [p for found in pool.map(check, range(0, len(ds), chunk)) for p in found], unchecked


def verify_cmd(
    root: Annotated[Path, typer.Argument(metavar="DIR", help="dataset folder (holds manifest.json)")],
    decode: Annotated[bool, typer.Option("--decode", help="also decode every field with the loader's codecs and list each that fails (a truncated or empty image...): what Loader(on_error='skip') would skip")] = False,
    json_dest: Annotated[str | None, json_option(JSON_HELP + ": ok and each problem")] = None,
) -> None:
    """Check every checksum (shard files, index files, each member) and that each tar's own
    member names are the index's keys; exit 1 on any mismatch. Shard files in the folder
    that the manifest does not name are listed (not an error). With --decode, also decode
    every sample and list the ones that fail."""
    from rich.progress import BarColumn, Progress, TextColumn, TransferSpeedColumn

    from feedline.format import read_manifest, unlisted_files, verify_shard

    check_json_dest(json_dest)
    root = _dataset_root(root)
    as_json = to_stdout(json_dest)
    manifest = read_manifest(root)
    problems = []
    columns = (TextColumn("[bold]verifying"), BarColumn(), TextColumn("{task.fields[shard]}"), TransferSpeedColumn())
    console = _console()
    with Progress(*columns, console=console, transient=True, disable=as_json or not console.is_terminal) as bar:
        task = bar.add_task("verify", total=sum(s.size for s in manifest.shards), shard="")
        for info in manifest.shards:
            bar.update(task, shard=info.name)
            problems.extend(verify_shard(root, info, manifest.checksum_algo, key_escape=manifest.key_escape))
            bar.advance(task, info.size)
        undecodable: list[dict[str, str]] = []
        unchecked: list[str] = []
        if decode and not problems:  # decoding bytes that fail their checksum says nothing more
            task = bar.add_task("decode", total=manifest.num_samples, shard="decoding samples")
            undecodable, unchecked = _decode_problems(root, lambda n: bar.advance(task, n))
    unlisted = unlisted_files(root, manifest)
    doc: dict[str, Any] = {"ok": not problems and not undecodable, "problems": [p.to_json() for p in problems],
                           "unlisted": unlisted}
    if decode:
        doc["undecodable"] = undecodable
        doc["not_decoded"] = unchecked
    write_json(doc, json_dest)
    if not as_json:
        for name in unlisted:
            print(printable(f"UNLISTED {name}: in the folder, not in manifest.json (never read: left over "
                            "from an earlier run, or copied in beside an older manifest)"))
    if as_json:
        pass
    elif problems or undecodable:
        for p in problems:
            print(printable(f"MISMATCH {p}"))
        for u in undecodable:
            print(printable(f"UNDECODABLE shard={u['shard']} key={u['key']} field={u['field']}: {u['error']}"))
        print(f"{len(problems) + len(undecodable)} problem(s) in {root}"
              + (f" ({len(undecodable)} sample(s) that Loader(on_error='skip') would skip)" if undecodable else ""))
    else:
        print(f"ok: {manifest.num_samples} samples in {len(manifest.shards)} shard(s) verified"
              + (", every field decoded" if decode and not unchecked else ""))
    if decode and unchecked and not as_json:  # before: "every field decoded", of a wav never decoded
        names = ", ".join(unchecked)
        print(printable(f"not decoded: {names}: no built-in decoder, so the loader gives the bytes "
                        f"(decode={{{unchecked[0]!r}: fn}}); checksums checked only"))
    if problems or undecodable:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add ``pack``, ``index``, ``inspect`` and ``verify`` to ``app``."""
    app.command("pack", epilog=epilog("pack"))(pack_cmd)
    app.command("index", epilog=epilog("index"))(index_cmd)
    app.command("inspect", epilog=epilog("inspect"))(inspect_cmd)
    app.command("verify", epilog=epilog("verify"))(verify_cmd)
