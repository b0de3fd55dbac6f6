"""The examples each command's ``--help`` ends with (typer's ``epilog``).

Each example is a command line as a user types it, with a comment; every one of them
parses (``tests/cli/test_main.py`` appends ``--help`` to each and runs it), so an
option renamed in a command cannot leave its help showing the old name.
"""

from __future__ import annotations

EXAMPLES: dict[str, tuple[str, ...]] = {
    "pack": (
        "feedline pack photos/ --out data/   # WebDataset names: 000123.jpg + 000123.cls are one sample",
        "feedline pack train/ --out data/train --labels from-folder   # an ImageFolder tree: integer cls, "
        "class list in the manifest",
        "feedline pack clips/ --out data/speech --labels metadata.csv --label-column speaker   # the files a "
        "CSV names: cls from one column, the other columns in a json field",
        "feedline pack corpus/ --out data/text --key file --exclude '*.md'   # one sample per file, dots in "
        "names kept (doc.v2.txt); the documents inside .jsonl files, tokenised for a language model: "
        "feedline.text.write_token_blocks (docs/loading.md, 'Text')",
        "feedline pack episodes/ --out data/robot --key episode --raw lidar:f4:4   # recorded episodes: one "
        "sample per frame, every sensor folder a field (feedline.episodes.Windows reads windows)",
    ),
    "index": (
        "feedline index old-shards/*.tar --out data-wds/   # adopt WebDataset tars as they are",
        "feedline index old-shards/ --out data-wds/   # every .tar of a folder",
    ),
    "inspect": (
        "feedline inspect data/train   # samples, fields, sizes, classes, alignment",
        "feedline inspect data/train --json inspect.json   # the same as JSON ('--json -': on stdout)",
    ),
    "verify": (
        "feedline verify data/train   # every checksum; exit 1 naming shard, key and field",
        "feedline verify data/train --decode   # also decode every sample: what on_error='skip' would skip",
        "feedline verify data/train --json verify.json   # ok and each problem as JSON",
    ),
    "diagnose": (
        "feedline diagnose -- python train.py   # the whole run, then the verdict and the fix",
        "feedline diagnose --steps 50 --html report.html -- python train.py --lr 0.1   # 50 steps, "
        "then an HTML report",
        "feedline diagnose --json - -- python train.py > report.json   # JSON on stdout (the script's own "
        "output goes to stderr)",
    ),
    "model": (
        "feedline model --read 12ms --decode 8ms --h2d 5ms --gpu 20ms   # serial vs pipelined step",
        "feedline model --read 12ms --decode 8ms --gpu 20ms --simulate --target-stall 5%   # fewest "
        "workers for a p99 stall under 5%",
    ),
    "doctor": (
        "feedline doctor   # every check with defaults",
        "feedline doctor --workers 2 --gpus 1 --data data/   # for this loader and dataset",
    ),
    "demo": (
        "feedline demo --frames 64 --steps 12 --batch-size 8 --out demo-run   # small, about a minute on a CPU",
    ),
}


def epilog(command: str) -> str:
    """The ``Examples:`` block of ``command``'s help: one paragraph per example (typer joins
    the lines of a paragraph)."""
    return "\n\n".join(("Examples:", *EXAMPLES[command]))
