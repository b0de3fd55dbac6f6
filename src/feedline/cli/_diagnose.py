"""``feedline diagnose``: run a training script unchanged and say where each step's time goes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

HELP = (
    "Run a training command unchanged and report where each step's time goes.\n\n"
    "Put the command after --, e.g. feedline diagnose --steps 50 --html report.html -- "
    "python train.py --lr 0.1\n\n"
    "DataLoader / feedline.Loader iteration, host-to-device copies and step boundaries are "
    "hooked in the child process; GPU time comes from CUDA events. Prints per-stage "
    "p50/p95/p99/max, the data-stall fraction, the verdict (data-bound, compute-bound, "
    "balanced), the model's prediction and the findings with their fixes. Exits with the "
    "training command's exit status."
)


def register(app: typer.Typer) -> None:
    """Add ``diagnose`` to ``app``."""

    @app.command(
        "diagnose",
        help=HELP,
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )
    def diagnose(
        ctx: typer.Context,
        steps: int | None = typer.Option(None, "--steps", help="Stop the run after N steps."),
        json_path: Path | None = typer.Option(None, "--json", help="Write the report as JSON."),
        trace: Path | None = typer.Option(
            None, "--trace", help="Write a Chrome/Perfetto trace of every stage span."),
        html: Path | None = typer.Option(
            None, "--html", help="Write an HTML report (timeline, histograms, tables)."),
        ab: bool = typer.Option(
            False, "--ab", help="Always run the synthetic-batch check (else only when unclear)."),
        replay: int = typer.Option(10, "--replay", help="Steps of the synthetic-batch check."),
        device: str = typer.Option(
            "auto", "--device", help="Where the step runs: auto, cpu, cuda:N."),
        name: str | None = typer.Option(None, "--name", help="Label of the run in reports."),
        quiet: bool = typer.Option(False, "--quiet", help="Do not print the report."),
    ) -> None:
        from feedline.observe import render_text, write_trace
        from feedline.observe.diagnose import run_diagnose

        code, rep = run_diagnose(list(ctx.args), steps=steps, ab=True if ab else None,
                                 replay=replay, device=device, name=name)
        if rep is None:
            print("feedline diagnose: the command wrote no report (it ended before "
                  "start-up finished, or was killed)", file=sys.stderr)
            raise typer.Exit(code or 1)
        if rep.steps == 0:
            print("feedline diagnose: no training steps measured: the command never iterated "
                  "a torch DataLoader or feedline.Loader", file=sys.stderr)
        if json_path is not None:
            json_path.write_text(json.dumps(rep.to_dict(), indent=1), encoding="utf-8")
        if trace is not None:
            write_trace(rep, trace)
        if html is not None:
            from feedline.observe.report_html import write_html

            write_html([rep], html)
        if not quiet:
            print(render_text(rep), file=sys.stderr)
        raise typer.Exit(code)
