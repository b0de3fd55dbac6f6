"""What a process pays before its first batch: ``import feedline``, building loaders and
the CLI load only what they use (each checked in a fresh interpreter via ``sys.modules``).

The costs these guard (CPU seconds, ``bench/startup.py``): rich + typer + pydantic about
0.1 s, numpy 0.05 s, feedline.observe 0.15 s, torch 0.9 s.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
# never needed to load batches: the CLI's, the reports', optional codecs and object stores
NOT_FOR_LOADING = ("rich", "typer", "click", "pydantic", "psutil", "fsspec", "PIL", "simplejpeg",
                   "matplotlib", "feedline.observe", "feedline.cli", "feedline.doctor",
                   "feedline.demo", "feedline.model", "feedline.checkpoint")


def _loaded(code: str, watch: tuple[str, ...]) -> list[str]:
    """Run ``code`` in a fresh interpreter; the modules of ``watch`` it left loaded."""
    probe = (f"{code}\nimport sys\n"
             f"print(sorted(m for m in {watch!r} if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return eval(out.stdout.strip().splitlines()[-1])  # a list of str printed by the probe


def test_import_feedline_loads_no_dependency() -> None:
    heavy = ("torch", "numpy", *NOT_FOR_LOADING, "feedline.pipeline", "feedline.io",
             "feedline.format")
    assert _loaded("import feedline; feedline.__version__", heavy) == []


def test_loaders_to_their_first_batch_load_nothing_they_do_not_use(tmp_path: Path) -> None:
    from feedline.format import pack

    src = tmp_path / "src"
    src.mkdir()
    for i in range(40):
        (src / f"{i:03d}.f32").write_bytes(np.full(8, i, np.float32).tobytes())
        (src / f"{i:03d}.cls").write_text(str(i % 3))
    pack([src], tmp_path / "ds", durable=False)
    code = (
        "import feedline, torch\n"
        f"ds = {str(tmp_path / 'ds')!r}\n"
        "class Items:\n"
        "    def __len__(self): return 16\n"
        "    def __getitem__(self, i): return {'x': torch.full((2,), i), 'y': i}\n"
        "for make in (lambda: feedline.Loader(ds, batch_size=8, workers=2),\n"
        "             lambda: feedline.Loader(ds, batch_size=8, workers=2),\n"
        "             lambda: feedline.Loader(Items(), batch_size=4, workers=2),\n"
        "             lambda: feedline.Loader(ds, batch_size=8, workers=2, worker_type='process',\n"
        "                                     start_method='fork')):\n"
        "    loader = make()\n"
        "    batch = next(iter(loader))\n"
        "    assert {len(v) for v in batch.values()} in ({4}, {8}), batch\n"
        "    loader.close()\n"
        "w = feedline.wrap([{'x': torch.arange(4)}], device='cpu')\n"
        "assert int(next(iter(w))['x'].sum()) == 6\n"
    )
    assert _loaded(code, NOT_FOR_LOADING) == []


def test_the_cli_loads_its_commands_packages_only_when_they_run() -> None:
    heavy = ("torch", "numpy", "psutil", "fsspec", "PIL", "matplotlib", "feedline.pipeline",
             "feedline.io", "feedline.format", "feedline.observe", "feedline.doctor",
             "feedline.demo", "feedline.model")
    assert _loaded("from feedline.cli.main import app", heavy) == []
