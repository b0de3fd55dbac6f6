"""Process workers started by the forkserver (``start_method="forkserver"``, used where
fork is not safe) come from a server that has imported torch once, so a worker does not import torch again when it imports the training script,
and every loader of the process shares the server. Checked from inside the workers of a
training-style script (``import torch`` at the top), not by timing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = '''
import os, sys
ALREADY = "torch" in sys.modules  # before this script's own import: inherited from the server?
if __name__ != "__main__":  # a worker importing the script (as __mp_main__)
    with open(os.path.join(os.environ["FL_OUT"], str(os.getpid())), "w") as f:
        f.write(f"{ALREADY} {os.getppid()}")
import torch
import feedline


class Squares:
    def __len__(self):
        return 16

    def __getitem__(self, i):
        return {"x": torch.full((3,), float(i * i))}


if __name__ == "__main__":
    kw = {"start_method": sys.argv[1]}
    for _ in range(2):  # a training loader, then a validation loader
        with feedline.Loader(Squares(), batch_size=4, workers=2, worker_type="process",
                             shuffle=False, **kw) as loader:
            got = sorted(int(v) for b in loader for v in b["x"][:, 0])
        assert got == [i * i for i in range(16)], got
    print(os.getpid())
'''


def _run(tmp_path: Path, method: str) -> tuple[int, list[tuple[bool, int]]]:
    out = tmp_path / method
    out.mkdir()
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "FL_OUT": os.fspath(out), "PYTHONPATH": os.fspath(ROOT / "src")}
    proc = subprocess.run([sys.executable, os.fspath(script), method], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [f.read_text().split() for f in out.iterdir()]
    return int(proc.stdout.split()[-1]), [(a == "True", int(ppid)) for a, ppid in records]


@pytest.mark.timeout(300)
def test_workers_fork_from_a_server_that_imported_torch(tmp_path: Path) -> None:
    pid, workers = _run(tmp_path, "forkserver")
    assert len(workers) == 4  # two loaders of two workers
    assert all(already for already, _ in workers), workers  # torch came with the fork
    servers = {ppid for _, ppid in workers}
    assert len(servers) == 1 and pid not in servers  # one server shared by both loaders


@pytest.mark.timeout(300)
def test_spawn_workers_import_torch_again(tmp_path: Path) -> None:
    # the contrast that makes the test above mean something: spawn starts bare interpreters
    pid, workers = _run(tmp_path, "spawn")
    assert len(workers) == 4 and not any(already for already, _ in workers)
    assert {ppid for _, ppid in workers} == {pid}


PACKAGE = '''
import os
with open(os.path.join(os.environ["FL_OUT"], f"imported-{os.getpid()}"), "w") as f:
    f.write("")


class Compose:  # stands for torchvision.transforms.Compose: the dataset holds one
    def __call__(self, sample):
        return sample
'''

SCRIPT_WITH_PACKAGE = '''
import os
import torch
import feedline
import userpkg


class Squares:
    def __init__(self):
        self.transform = userpkg.Compose()

    def __len__(self):
        return 16

    def __getitem__(self, i):
        return self.transform({"x": torch.full((3,), float(i * i))})


if __name__ == "__main__":
    for _ in range(2):  # a training loader, then a validation loader
        with feedline.Loader(Squares(), batch_size=4, workers=2, worker_type="process",
                             start_method="forkserver", shuffle=False) as loader:
            assert sum(len(b["x"]) for b in loader) == 16
    print(os.getpid())
'''


@pytest.mark.timeout(300)
def test_the_server_imports_the_packages_the_dataset_comes_from(tmp_path: Path) -> None:
    # a torchvision ImageFolder (or a dataset holding a torchvision Compose) made every
    # worker of every loader import torchvision again: 2 s per loader on a busy host
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "userpkg.py").write_text(PACKAGE)
    script = tmp_path / "train.py"
    script.write_text(SCRIPT_WITH_PACKAGE)
    env = {**os.environ, "FL_OUT": os.fspath(out), "PYTHONPATH": os.fspath(ROOT / "src")}
    proc = subprocess.run([sys.executable, os.fspath(script)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    importers = {int(f.name.split("-")[1]) for f in out.iterdir()}
    pid = int(proc.stdout.split()[-1])
    # the script and the forkserver, once each; no worker of either loader (4 before)
    assert pid in importers and len(importers) == 2, importers


def test_packages_of_looks_one_level_into_the_dataset() -> None:
    import fractions
    import json
    import textwrap

    from feedline.pipeline.forkserver import packages_of

    class Holder:  # this test module's class: its own package is named, builtins are not
        def __init__(self) -> None:
            self.decoder = json.JSONDecoder()
            self.steps = [fractions.Fraction(1), 3, "a"]
            self.fn = textwrap.dedent
            self.n = 5

    got = packages_of(Holder(), None, len)
    assert {"json", "fractions", "textwrap"} <= set(got)
    assert "builtins" not in got and "__main__" not in got
    assert Holder.__module__.partition(".")[0] in got
