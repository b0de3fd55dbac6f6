"""Every ```bash and ```python block of README.md runs, in order, as a user would.

The blocks run in one bash session in a fresh folder that holds what the
README's paths expect (an ImageFolder tree ``train/``, WebDataset-named files in
``photos/``, a tar in ``old-shards/``) and a ``.venv`` link to this interpreter's
environment, so ``source .venv/bin/activate`` works as written. A python block
runs as its own script in that folder with the activated ``python``; a block
after ``<!-- file: NAME -->`` is written to ``NAME`` (a later block runs it);
a block after ``<!-- no-test... -->`` is skipped: only the two set-up commands
at the top, which reinstall the environment.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
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


def _jpeg(img: np.ndarray, fmt: str = "JPEG") -> bytes:
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format=fmt, quality=85)
    return buf.getvalue()


def _photo(rng: np.random.Generator, h: int, w: int, tint: int) -> np.ndarray:
    yy, xx = np.mgrid[0:h, 0:w]
    img = np.stack([(yy * 255 // h), (xx * 255 // w), np.full((h, w), tint)], axis=2)
    return np.clip(img + rng.integers(-20, 20, img.shape), 0, 255).astype(np.uint8)


def make_user_data(root: Path) -> None:
    """What a user brings: phone photos in class folders (dots in names, mixed
    orientation and extensions, sub-folders, a palette PNG, ``__MACOSX``/``.DS_Store``/
    ``Thumbs.db``), WebDataset-named files, an old tar shard."""
    rng = np.random.default_rng(0)
    for c, (cls, tint) in enumerate((("cats", 30), ("dogs", 130), ("owls", 230))):
        folder = root / "train" / cls
        folder.mkdir(parents=True)
        for i in range(20):
            h, w = (320, 240) if i % 20 == 3 else (240, 320)  # 5% portrait
            ext, fmt = ((".png", "PNG") if i == 7 else (".JPEG", "JPEG") if i % 5 == 1
                        else (".jpg", "JPEG"))
            (folder / f"IMG_2023.01.0{c}_{1000 + i}{ext}").write_bytes(
                _jpeg(_photo(rng, h, w, tint), fmt))
        # a sub-folder per class, a palette PNG and the litter of a zip made on a Mac and
        # a folder browsed on Windows: __MACOSX would be class 0, before "cats"
        (folder / "2024" / "Jan").mkdir(parents=True)
        Image.fromarray(_photo(rng, 240, 320, tint)).convert("P").save(folder / "2024" / "Jan" / "scan 1.PNG")
        (folder / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1" + bytes(64))
        (folder / "Thumbs.db").write_bytes(bytes(512))
        (root / "train" / "__MACOSX" / cls).mkdir(parents=True)
        (root / "train" / "__MACOSX" / cls / "._IMG_2023.01.00_1000.jpg").write_bytes(b"\x00\x05\x16\x07" + bytes(64))
    photos = root / "photos"
    photos.mkdir()
    for i in range(40):
        (photos / f"{i:06d}.jpg").write_bytes(_jpeg(_photo(rng, 48, 64, 7 * i % 256)))
        (photos / f"{i:06d}.cls").write_text(str(i % 4))
    (root / "old-shards").mkdir()
    with tarfile.open(root / "old-shards" / "shard-000000.tar", "w") as tar:
        for i in range(8):
            for name, data in ((f"{i:06d}.jpg", _jpeg(_photo(rng, 48, 64, 9))),
                               (f"{i:06d}.cls", str(i % 2).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def session_script(blocks: list[Block]) -> str:
    """One bash script: bash blocks inline, python blocks as files run by ``python``."""
    parts = ["set -euo pipefail"]
    for n, b in enumerate(blocks):
        parts.append(f"echo '=== README.md line {b.line} ({b.lang}) ===' >&2")
        if b.marker.startswith("file:"):
            name = b.marker.split(":", 1)[1].strip()
            parts.append(f"cat > {name} <<'README_EOF'\n{b.body}README_EOF")
        elif b.lang == "python":
            parts.append(f"cat > readme_block_{n}.py <<'README_EOF'\n{b.body}README_EOF")
            parts.append(f"python readme_block_{n}.py")
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
    make_user_data(tmp_path)
    (tmp_path / ".venv").symlink_to(venv)
    script = tmp_path / "readme.sh"
    script.write_text(session_script(runnable(readme_blocks(README.read_text(encoding="utf-8")))))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "PYTHONUNBUFFERED": "1",
           "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "")}
    env.pop("VIRTUAL_ENV", None)
    proc = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=880)
    assert proc.returncode == 0, f"{proc.stderr[-6000:]}\n--- stdout ---\n{proc.stdout[-3000:]}"
    # what the blocks promise exists
    for path in ("demo-run/report.html", "loader_state.json", "report.json", "report.html",
                 "data/train/manifest.json",
                 "trace.json", "data/manifest.json", "data-wds/manifest.json", "verify.json",
                 "loader.json"):
        assert (tmp_path / path).exists(), path
    assert "resuming at epoch 2" in proc.stdout
    assert "0=cats, 1=dogs, 2=owls" in proc.stdout  # feedline inspect of the packed ImageFolder


def test_no_words_only_the_authors_know() -> None:
    """The README speaks to users: no references to the project's internal material."""
    text = README.read_text(encoding="utf-8")
    for word in ("seed 00", "seed's", "here)", "story"):
        assert word not in text, word
