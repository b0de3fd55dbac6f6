"""``feedline demo``: from the naive loader to a fed GPU, measured on this machine."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from feedline.cli._examples import epilog
from feedline.cli._output import JSON_HELP, check_json_dest, json_option, to_stdout, write_json


def demo(
    out: Path = typer.Option(
        None, "--out", help="Work folder for the raw log and the shards (kept). "
        "Default: a temporary folder, removed afterwards unless --keep."),
    frames: int = typer.Option(512, "--frames", min=1, help="Frames (samples) in the synthetic log."),
    steps: int = typer.Option(
        50, "--steps", min=1, help="Training steps of each run (the loaders go round again "
        "if one pass over the frames is shorter)."),
    batch_size: int = typer.Option(16, "--batch-size", min=1, help="Samples per batch, both runs."),
    workers: int = typer.Option(
        None, "--workers", min=1, help="feedline.Loader threads (default: on cuda the cores, at most 8; on "
        "cpu half the cores, since the step itself runs there)."),
    device: str = typer.Option(
        None, "--device", help="cpu or cuda[:N] (default: cuda when present, else cpu)."),
    width: int = typer.Option(160, "--width", min=64, help="Camera image width in pixels."),
    height: int = typer.Option(120, "--height", min=48, help="Camera image height in pixels."),
    lidar_points: int = typer.Option(
        2000, "--lidar-points", min=2, help="Most lidar points per sweep (each sweep has "
        "between half of this and this many)."),
    imu_window: int = typer.Option(
        10, "--imu-window", min=1, help="IMU samples per frame at 100 Hz (10 = the 100 ms "
        "before the frame)."),
    keep: bool = typer.Option(False, "--keep", help="Keep the temporary work folder."),
    json_path: Annotated[
        str | None, json_option(JSON_HELP + ": both runs, \"speedup\" and the host load")
    ] = None,
    html_path: Path = typer.Option(
        None, "--html", help="HTML report path (default: report.html in --out, else in ./feedline-demo/)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the data, the model init and the order."),
) -> None:
    """Make a driving log, pack it, train a small model twice and print the before/after table.

    The same model trains from the same init for the same steps, first with a
    naive DataLoader over the small files, then with feedline.Loader over shards.
    """
    from rich.console import Console

    from feedline.demo import DemoConfig, SynthConfig, run_demo  # no torch yet
    from feedline.errors import ConfigError

    check_json_dest(json_path)
    check_json_dest(html_path, "--html")  # a folder, or one that does not exist: before the runs
    cfg = DemoConfig(
        synth=SynthConfig(frames=frames, width=width, height=height, seed=seed,
                          lidar_points=(lidar_points // 2, lidar_points), imu_window=imu_window),
        steps=steps, batch_size=batch_size, workers=workers, device=device, out=out,
        keep=keep, json_path=None if json_path is None or to_stdout(json_path) else Path(json_path),
        html_path=html_path,
    )
    try:
        cfg.validate()  # every argument error comes before torch loads (2-3 s of CPU)
        if out is not None:  # and an --out that cannot be a folder (a file, a link loop)
            out.mkdir(parents=True, exist_ok=True)
        from feedline.demo.runs import pick_device

        pick_device(cfg.device)  # a missing GPU fails here, before any progress output
    except ValueError as e:
        raise ConfigError(str(e), fix="see feedline demo --help") from e
    # with --json - stdout carries the JSON only; the table and progress go to stderr
    result = run_demo(cfg, Console(stderr=True) if to_stdout(json_path) else None)
    if to_stdout(json_path):
        write_json(result.table, json_path)


def register(app: typer.Typer) -> None:
    """Add ``feedline demo`` to ``app``."""
    app.command("demo", epilog=epilog("demo"))(demo)
