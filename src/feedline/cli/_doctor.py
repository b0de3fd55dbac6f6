"""``feedline doctor``: check the host before a run (exit 1 if any check fails)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from feedline.cli._examples import epilog
from feedline.cli._output import check_exists, check_json_dest, json_option, to_stdout, write_json

if TYPE_CHECKING:
    from feedline.doctor import Check

_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red", "info": "cyan"}


def render_table(checks: list[Check]) -> None:
    """Print the findings as a rich table plus a one-line summary."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="feedline doctor", title_justify="left")
    table.add_column("status")
    table.add_column("check", no_wrap=True)
    table.add_column("detail")
    with_fix = any(ch.fix for ch in checks)
    if with_fix:
        table.add_column("fix")
    for ch in checks:
        cells = [f"[{_STYLE[ch.status]}]{ch.status}[/]", ch.name, ch.detail]
        table.add_row(*cells, *([ch.fix or ""] if with_fix else []))
    console = Console()
    console.print(table)
    counts = {s: sum(ch.status == s for ch in checks) for s in _STYLE}
    console.print(", ".join(f"{n} {s}" for s, n in counts.items()), soft_wrap=True)


def doctor(
    workers: Annotated[int | None, typer.Option(help="planned loader workers per GPU")] = None,
    prefetch: Annotated[int, typer.Option(help="batches each worker keeps outstanding")] = 2,
    batch_bytes: Annotated[
        str | None, typer.Option(help="bytes of one batch, e.g. 64MiB (for the /dev/shm need)")
    ] = None,
    pinned_budget: Annotated[
        str | None, typer.Option(help="pinned host memory the loader may hold, e.g. 4GiB")
    ] = None,
    gpus: Annotated[int | None, typer.Option(help="GPUs the run will use (default: all found)")] = None,
    data: Annotated[str | None, typer.Option(help="dataset path, to check its NUMA placement")] = None,
    sysfs: Annotated[str, typer.Option(hidden=True, help="sysfs root to read")] = "/sys",
    json_dest: Annotated[str | None, json_option()] = None,
) -> int:
    """Check /dev/shm, locked memory, cores, free memory, GPUs, NVMe, NUMA placement and GDS."""
    from feedline.doctor import exit_code, run_doctor
    from feedline.units import parse_bytes

    check_json_dest(json_dest)
    if data is not None:
        check_exists(data, "dataset path", "--data")
    checks = run_doctor(
        workers=workers,
        prefetch=prefetch,
        batch_bytes=None if batch_bytes is None else parse_bytes(batch_bytes, name="--batch-bytes"),
        pinned_budget=None
        if pinned_budget is None
        else parse_bytes(pinned_budget, name="--pinned-budget"),
        gpus=gpus,
        data=data,
        sysfs=sysfs,
    )
    code = exit_code(checks)
    write_json({"checks": [ch.to_dict() for ch in checks], "exit_code": code}, json_dest)
    if not to_stdout(json_dest):
        render_table(checks)
    return code


def register(app: typer.Typer) -> None:
    """Add ``feedline doctor`` to ``app``."""
    app.command("doctor", epilog=epilog("doctor"))(doctor)
