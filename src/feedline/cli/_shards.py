"""``feedline pack | index | inspect | verify``: build and check shard datasets.

``pack`` turns folders of small files into tar shards with an index and a
manifest (progress bar with files/s and MB/s); ``index`` adopts existing
WebDataset tars; ``inspect`` summarises a dataset; ``verify`` checks every
checksum and exits 1 naming the shard, key and field of each mismatch.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

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
    rate = f"{files / seconds:,.0f} files/s, {nbytes / seconds / 1e6:,.1f} MB/s" if seconds > 0 else ""
    return (
        f"packed {manifest.num_samples} samples ({files} files) into {len(manifest.shards)} "
        f"shard(s), {format_bytes(total)}, in {seconds:.2f} s ({rate}) -> {Path(out) / 'manifest.json'}"
    )


def pack_cmd(
    src: Annotated[list[Path], typer.Argument(help="folders of files grouped by key (KEY.FIELD names), or list files with one path per line")],
    out: Annotated[Path, typer.Option("--out", "-o", help="output folder for shards, indexes and manifest.json")],
    shard_size: Annotated[str, typer.Option("--shard-size", help="target shard size (samples are never split), e.g. 512MiB, 1GiB")] = "1GiB",
    align: Annotated[int, typer.Option("--align", help="pad so each sample's first byte is on this boundary (0 = off; 4096 for O_DIRECT/GDS)")] = 0,
    workers: Annotated[int, typer.Option("--workers", "-j", help="threads that read and checksum files (output order is preserved)")] = 1,
    checksum: Annotated[str, typer.Option("--checksum", help="checksum algorithm: xxh3 or crc32c (needs the crc32c package)")] = "xxh3",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress bar")] = False,
    no_fsync: Annotated[bool, typer.Option("--no-fsync", help="skip fsync (scratch copies): still atomic if the run is killed, but a power loss may leave shards incomplete")] = False,
) -> None:
    """Pack small files into tar shards with a binary index and an atomic manifest."""
    from feedline.format import pack

    size = parse_bytes(shard_size, name="--shard-size")
    console = _console()
    start = time.perf_counter()
    last = [0.0]
    if quiet:
        manifest = pack(src, out, shard_size=size, align=align, workers=workers, checksum_algo=checksum,
                        durable=not no_fsync)
    else:
        with _pack_progress(console) as bar:
            task = bar.add_task("packing", total=None, files=0, files_total=0, shards="")

            def report(p: PackProgress) -> None:
                now = time.perf_counter()
                if now - last[0] < 0.05 and p.files_done < p.files_total:
                    return  # a redraw per sample would cost more than packing it
                last[0] = now
                bar.update(
                    task, total=p.bytes_total, completed=p.bytes_done, files=p.files_done,
                    files_total=p.files_total,
                    shards=f"shard {p.shards_done}/{p.shards_total}" + (f" ({p.shards_reused} reused)" if p.shards_reused else ""),
                )

            manifest = pack(src, out, shard_size=size, align=align, workers=workers, checksum_algo=checksum,
                            progress=report, durable=not no_fsync)
    seconds = time.perf_counter() - start
    files = sum(int(f["count"]) for f in manifest.fields.values())
    nbytes = sum(int(f["total_bytes"]) for f in manifest.fields.values())
    print(_summary(manifest, str(out), seconds, nbytes, files))


def index_cmd(
    tars: Annotated[list[Path], typer.Argument(help="existing WebDataset .tar files, in dataset order (never modified)")],
    out: Annotated[Path | None, typer.Option("--out", "-o", help="dataset root for the .idx files and manifest.json (default: the first tar's folder)")] = None,
    checksum: Annotated[str, typer.Option("--checksum", help="checksum algorithm: xxh3 or crc32c")] = "xxh3",
) -> None:
    """Adopt existing tar shards: build their indexes and a manifest without rewriting them."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from feedline.format import index_tars

    columns = (TextColumn("[bold]indexing"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=_console(), transient=True) as bar:
        task = bar.add_task("index", total=len(tars))
        manifest = index_tars(tars, out, checksum_algo=checksum, progress=lambda done, _: bar.update(task, completed=done))
    root = out if out is not None else tars[0].parent
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
    lines.append("shards:")
    for s in info["shards"]:
        lines.append(
            f"  {s['name']:<24} {s['num_samples']:>8} samples {format_bytes(s['size']):>10}, "
            f"{s['aligned_samples']} aligned"
        )
    return lines


def inspect_cmd(
    root: Annotated[Path, typer.Argument(help="dataset folder (holds manifest.json)")],
    as_json: Annotated[bool, typer.Option("--json", help="print machine-readable JSON")] = False,
) -> None:
    """Show a dataset's shards, samples, fields, sizes and alignment."""
    from feedline.format import inspect

    info = inspect(root)
    print(json.dumps(info, indent=1) if as_json else "\n".join(_inspect_lines(info)))


def verify_cmd(
    root: Annotated[Path, typer.Argument(help="dataset folder (holds manifest.json)")],
    as_json: Annotated[bool, typer.Option("--json", help="print machine-readable JSON")] = False,
) -> None:
    """Check every checksum (shard files, index files, each member); exit 1 on any mismatch."""
    from rich.progress import BarColumn, Progress, TextColumn, TransferSpeedColumn

    from feedline.format import read_manifest, verify_shard

    manifest = read_manifest(root)
    problems = []
    columns = (TextColumn("[bold]verifying"), BarColumn(), TextColumn("{task.fields[shard]}"), TransferSpeedColumn())
    with Progress(*columns, console=_console(), transient=True, disable=as_json) as bar:
        task = bar.add_task("verify", total=sum(s.size for s in manifest.shards), shard="")
        for info in manifest.shards:
            bar.update(task, shard=info.name)
            problems.extend(verify_shard(root, info, manifest.checksum_algo))
            bar.advance(task, info.size)
    if as_json:
        print(json.dumps({"ok": not problems, "problems": [p.to_json() for p in problems]}, indent=1))
    elif problems:
        for p in problems:
            print(f"MISMATCH {p}")
        print(f"{len(problems)} problem(s) in {root}")
    else:
        print(f"ok: {manifest.num_samples} samples in {len(manifest.shards)} shard(s) verified")
    if problems:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add ``pack``, ``index``, ``inspect`` and ``verify`` to ``app``."""
    app.command("pack")(pack_cmd)
    app.command("index")(index_cmd)
    app.command("inspect")(inspect_cmd)
    app.command("verify")(verify_cmd)
