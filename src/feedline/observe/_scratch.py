"""Files ``feedline diagnose`` keeps in its temporary folders, written so that a temp
cleaner cannot break the run it measures.

``diagnose`` and its hooks write into folders under ``$TMPDIR`` (the command's result and
partial reports, the DataLoader workers' span logs). A run of days can outlive them: a
temp cleaner (systemd-tmpfiles, tmpreaper, a job's epilogue) may remove the folder while
the command trains. Opening a file there then raised ``FileNotFoundError`` inside the
command's DataLoader workers (the training crashed) and lost its report. Here a missing
folder is made again (mode 0700, as ``mkdtemp`` made it), and the write goes on.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO


def open_text(path: Path, mode: str) -> IO[str]:
    """``open(path, mode)`` as UTF-8 text, making ``path``'s folder again when it is gone."""
    try:
        return open(path, mode, encoding="utf-8")
    except FileNotFoundError:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        return open(path, mode, encoding="utf-8")
