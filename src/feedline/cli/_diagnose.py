"""``feedline diagnose``: run a training script unchanged and say where each step's time goes."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from feedline.cli._examples import epilog
from feedline.cli._output import JSON_HELP, check_json_dest, to_stdout, write_json

HELP = (
    "Run a training command unchanged and report where each step's time goes.\n\n"
    "Put the command after --, e.g. feedline diagnose --steps 50 --html report.html -- "
    "python train.py --lr 0.1\n\n"
    "Every DataLoader / feedline.Loader next() on any thread, worker fetch and collate "
    "(fork, spawn and forkserver workers) and host-to-device copies are timed in the child "
    "process; GPU time comes from CUDA events. Each loader is reported separately; the "
    "verdict (data-bound, compute-bound, balanced, or unknown with the reason) is about the "
    "training loader (not run inside another loader's pass, with the most steps or far the longest passes); --steps counts its steps only. The run is the user's run: nothing is "
    "replayed unless --ab is given with --steps. Exits with the training command's exit "
    "status (128+N when it was killed by signal N); SIGTERM and SIGINT are passed on to it."
)


def register(app: typer.Typer) -> None:
    """Add ``diagnose`` to ``app``."""

    @app.command(
        "diagnose",
        help=HELP,
        epilog=epilog("diagnose"),
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )
    def diagnose(
        ctx: typer.Context,
        steps: int | None = typer.Option(
            None, "--steps", help="End the run after N steps of the training loader."),
        json_path: str | None = typer.Option(
            None, "--json", metavar="PATH",
            help=JSON_HELP + "; with '-' the command's own output goes to stderr, so stdout is the JSON alone"),
        trace: Path | None = typer.Option(
            None, "--trace", help="Write a Chrome/Perfetto trace of every stage span."),
        html: Path | None = typer.Option(
            None, "--html", help="Write an HTML report (timeline, histograms, tables)."),
        ab: bool = typer.Option(
            False, "--ab", help="After the --steps measured steps, replay the last batch "
            "(the synthetic-batch check: the step without the data path). Needs --steps."),
        replay: int = typer.Option(10, "--replay", help="Steps of the synthetic-batch check."),
        device: str = typer.Option(
            "auto", "--device", help="Where the step runs: auto, cpu, cuda:N."),
        name: str | None = typer.Option(None, "--name", help="Label of the run in reports."),
        quiet: bool = typer.Option(False, "--quiet", help="Do not print the report."),
        partial_every: float = typer.Option(
            5.0, "--partial-every", help="Seconds between partial reports kept in case the "
            "command is killed (0: none)."),
    ) -> None:
        from feedline.observe import render_text, write_trace
        from feedline.observe.diagnose import run_diagnose

        check_json_dest(json_path)
        check_json_dest(trace, "--trace")  # before: checked after the run, whose report was then lost
        check_json_dest(html, "--html")
        code, rep = run_diagnose(list(ctx.args), steps=steps, ab=ab, replay=replay,
                                 device=device, name=name, partial_every=partial_every,
                                 # --json -: stdout carries the JSON only, the script prints to stderr
                                 stdout=2 if to_stdout(json_path) else None)
        if rep is None:
            print("feedline diagnose: the command wrote no report (it ended before "
                  "start-up finished, or was killed before its first partial report)",
                  file=sys.stderr)
            raise typer.Exit(code or 1)
        if rep.host.get("partial"):
            print(f"feedline diagnose: the command ended with status {code} before writing its "
                  "report; this is its last partial report", file=sys.stderr)
        if rep.steps == 0 and rep.verdict == "unknown":
            print(f"feedline diagnose: no training steps measured: {rep.reason}", file=sys.stderr)
        write_json(rep.to_dict(), json_path)
        if trace is not None:
            write_trace(rep, trace)
        if html is not None:
            from feedline.observe.report_html import write_html

            write_html([rep], html)
        if not quiet and not to_stdout(json_path):
            print(render_text(rep), file=sys.stderr)
        raise typer.Exit(code)
