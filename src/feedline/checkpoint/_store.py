"""A checkpoint directory: naming, atomic commit, listing and ``keep=K`` rotation.

Step ``N`` is two files: ``step-000000000N.<token>.bin`` (the data, a fresh
name on every save so re-saving a step never touches the committed bytes) and
``step-000000000N.json`` (the header). A checkpoint exists exactly when its
header does: the data file is written and fsynced first, then the header is
written to a temporary name, fsynced, renamed over the final name and the
directory fsynced (:func:`feedline.format._atomic.write_atomic`). A crash at
any point leaves every earlier checkpoint as it was; leftovers (data files no
header names, temporary headers) are removed by the next commit.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from pathlib import Path
from typing import Any

from feedline.checkpoint._layout import Header, parse_header
from feedline.errors import FormatError, ReadError
from feedline.format._atomic import fsync_dir, remove_quietly, write_atomic

_HEADER = re.compile(r"^step-(\d{10})\.json$")


def header_path(directory: Path, step: int) -> Path:
    """Where step ``step``'s header lives."""
    return directory / f"step-{step:010d}.json"


def new_data_name(step: int) -> str:
    """A fresh data file name for a save of ``step``."""
    return f"step-{step:010d}.{secrets.token_hex(4)}.bin"


def committed_steps(directory: Path) -> list[int]:
    """Steps whose header is in ``directory``, oldest first."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(int(m.group(1)) for n in names if (m := _HEADER.match(n)))


def read_header(directory: Path, step: int) -> Header:
    """Parse and validate step ``step``'s header.

    Raises:
        ReadError: no such checkpoint.
        FormatError: the header is not valid JSON or not a checkpoint header.
    """
    path = header_path(directory, step)
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        have = committed_steps(directory)
        raise ReadError(f"no checkpoint for step {step} in {directory}", path=str(directory),
                        fix=f"committed steps are {have[-5:]}" if have else "save one first") from None
    try:
        doc = json.loads(text)
    except (ValueError, UnicodeDecodeError) as e:
        raise FormatError(f"checkpoint header is not valid JSON ({e})", path=str(path),
                          fix="this checkpoint is damaged; load an older step") from e
    header = parse_header(doc, path=str(path))
    if header.step != step:
        raise FormatError(f"header says step {header.step}, file name says {step}", path=str(path))
    return header


def commit(directory: Path, step: int, header: dict[str, Any], *, durable: bool = True) -> None:
    """Publish step ``step``: its data file must already be complete (and fsynced)."""
    text = json.dumps(header, separators=(",", ":"), allow_nan=False).encode()
    write_atomic(header_path(directory, step), text, durable=durable)


def rotate(directory: Path, keep: int | None, *, protect: str) -> list[int]:
    """Keep the newest ``keep`` checkpoints, remove the rest and any leftovers; return removed steps.

    Headers go first (and the directory is fsynced) so a checkpoint is never
    visible without its data. ``protect`` is the data file just committed.
    """
    steps = committed_steps(directory)
    drop = steps[:-keep] if keep is not None and len(steps) > keep else []
    for step in drop:
        remove_quietly(header_path(directory, step))
    if drop:
        fsync_dir(directory)
    live = {protect}
    for step in committed_steps(directory):
        try:
            live.add(json.loads(header_path(directory, step).read_bytes())["data"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a damaged header: keep whatever it may name
    for name in os.listdir(directory):
        orphan = name.startswith("step-") and name.endswith(".bin") and name not in live
        if orphan or (name.startswith(".step-") and name.endswith(".partial")):
            remove_quietly(directory / name)
    return drop
