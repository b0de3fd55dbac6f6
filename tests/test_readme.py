"""Every ```bash and ```python block of README.md runs, in order, as a user would.

The blocks run in one bash session in a fresh folder that holds what the
README's ``.venv`` expects: a link to this interpreter's environment, so ``source
.venv/bin/activate`` works as written; the README's own first block writes the example
inputs (``python -m feedline.demo.examples try/``) and works in ``try/`` from there. A python block
runs as its own script in that folder as the activated ``python`` runs it, in a
process forked from one interpreter that imported torch and feedline once
(readme_warm.py: the imports are the set-up every block shares); a block
after ``<!-- file: NAME -->`` is written to ``NAME`` (a later block runs it);
a block after ``<!-- no-test... -->`` is skipped: only the two set-up commands
at the top, which reinstall the environment.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
WARM = Path(__file__).with_name("readme_warm.py")
FENCE = re.compile(
    r"(?:<!--\s*(?P<marker>[^>]*?)\s*-->\s*\n)?^```(?P<lang>[a-z]*)[^\n]*\n(?P<body>.*?)^```[ \t]*$",
    re.M | re.S,
)


@dataclass(frozen=True)
class Block:
    lang: str
    body: str
    line: int
    marker: str  # "", "no-test...", "file: NAME"


def readme_blocks(text: str) -> list[Block]:
    """Every fenced block of ``text`` with its language, line and marker comment."""
    return [Block(m["lang"], m["body"], text.count("\n", 0, m.start("body")), m["marker"] or "")
            for m in FENCE.finditer(text)]


def runnable(blocks: list[Block]) -> list[Block]:
    return [b for b in blocks if b.lang in ("bash", "python")
            and not b.marker.startswith("no-test")]


def session_script(blocks: list[Block], runner: str = "python") -> str:
    """One bash script: bash blocks inline, python blocks as files run by ``runner``
    (``python``, or the warm runner's client that runs the file as ``python`` would)."""
    parts = ["set -euo pipefail"]
    for n, b in enumerate(blocks):
        parts.append(f"echo '=== README.md line {b.line} ({b.lang}) ===' >&2")
        if b.marker.startswith("file:"):
            name = b.marker.split(":", 1)[1].strip()
            parts.append(f"cat > {name} <<'README_EOF'\n{b.body}README_EOF")
        elif b.lang == "python":
            parts.append(f"cat > readme_block_{n}.py <<'README_EOF'\n{b.body}README_EOF")
            parts.append(f"{runner} readme_block_{n}.py")
        else:
            parts.append(b.body)
    return "\n".join(parts) + "\n"


def test_blocks_are_found_and_few_are_skipped() -> None:
    blocks = readme_blocks(README.read_text(encoding="utf-8"))
    skipped = [b for b in blocks if b.lang in ("bash", "python") and b.marker.startswith("no-test")]
    assert len(runnable(blocks)) >= 8
    assert len(skipped) == 1 and skipped[0].line < 10, "only the set-up commands may be skipped"
    assert [ln.split("#")[0].strip() for ln in skipped[0].body.splitlines()] == [
        "bash scripts/demo.sh", "bash scripts/test.sh"]
    files = [b.marker for b in blocks if b.marker.startswith("file:")]
    assert files == ["file: train.py"]


@pytest.mark.timeout(900)
def test_every_readme_block_runs(tmp_path: Path) -> None:
    venv = Path(sys.prefix)
    if not (venv / "bin" / "activate").exists():
        pytest.fail(f"run the tests from the project's virtual environment ({venv} has no "
                    "bin/activate): bash scripts/test.sh")
    (tmp_path / ".venv").symlink_to(venv)
    sock = tmp_path / "warm.sock"
    script = tmp_path / "readme.sh"
    script.write_text(session_script(runnable(readme_blocks(README.read_text(encoding="utf-8"))),
                                     f"python {WARM} run {sock}"))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "PYTHONUNBUFFERED": "1",
           "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "")}
    env.pop("VIRTUAL_ENV", None)
    # the python blocks fork from one interpreter that imported torch and feedline: each block
    # is still its own process (the bash blocks' `python` and `feedline` commands are real
    # interpreters), without its 2-3 s of imports
    warm = subprocess.Popen([sys.executable, str(WARM), "serve", str(sock)], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert warm.stdout is not None and warm.stdout.readline() == "ready\n"
        proc = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=880)
    finally:
        warm.kill()
        warm.wait()
    assert proc.returncode == 0, f"{proc.stderr[-6000:]}\n--- stdout ---\n{proc.stdout[-3000:]}"
    # what the blocks promise exists
    for path in ("demo-run/report.html", "ckpt", "report.json", "report.html",
                 "data/train/manifest.json",
                 "trace.json", "data/manifest.json", "data-wds/manifest.json", "verify.json",
                 "loader.json"):
        assert (tmp_path / "try" / path).exists(), path
    assert "resuming at epoch 1 after 2 batches" in proc.stdout
    assert "0=cats, 1=dogs, 2=owls" in proc.stdout  # feedline inspect of the packed ImageFolder


def test_no_words_only_the_authors_know() -> None:
    """The README speaks to users: no references to the project's internal material."""
    text = README.read_text(encoding="utf-8")
    for word in ("seed 00", "seed's", "here)", "story"):
        assert word not in text, word


def test_the_guide_keeps_what_users_need() -> None:
    """What a new user must find in the README itself, not only in docs/: the defaults
    that differ from DataLoader, the --json convention, what to run after copying data,
    the fault table, the peers table, GPU decode and placement, the checkpoint table and
    which checkpointer to use when, and the GPU check."""
    text = README.read_text(encoding="utf-8")
    for needed in ("**`shuffle=True` by default**", "**`drop_last=True` by default**",
                   "`--json PATH`", "`--json -`", "run `feedline verify DIR`",
                   "(docs/faults.md)", "bench/peers.py", "| torch DataLoader (files) |",
                   "`decode_on", "`placement", "| `Checkpointer.save`", "**Which to use when.**",
                   "bench/gpu_check.py"):
        assert needed in text, needed
    assert 400 < text.count("\n") < 800, "the README is a guide; depth goes to docs/"
