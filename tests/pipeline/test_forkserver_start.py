"""Process workers started by the forkserver (``start_method="forkserver"``, used where
fork is not safe) come from a server that has imported torch once, so a worker does not import torch again when it imports the training script,
and every loader of the process shares the server. Checked from inside the workers of a
training-style script (``import torch`` at the top), not by timing."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
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
    for _ in range(int(sys.argv[2])):  # a training loader, then a validation loader
        with feedline.Loader(Squares(), batch_size=4, workers=2, worker_type="process",
                             shuffle=False, **kw) as loader:
            got = sorted(int(v) for b in loader for v in b["x"][:, 0])
        assert got == [i * i for i in range(16)], got
    print(os.getpid())
'''


def _run(tmp_path: Path, method: str, loaders: int) -> tuple[int, list[tuple[bool, int]]]:
    out = tmp_path / method
    out.mkdir()
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "FL_OUT": os.fspath(out), "PYTHONPATH": os.fspath(ROOT / "src")}
    proc = subprocess.run([sys.executable, os.fspath(script), method, str(loaders)], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [f.read_text().split() for f in out.iterdir()]
    return int(proc.stdout.split()[-1]), [(a == "True", int(ppid)) for a, ppid in records]


@pytest.fixture(scope="module")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Future]]:
    """The module's three training scripts, started side by side (each is a fresh interpreter
    importing torch; they check which process imported what, not timings)."""
    with ThreadPoolExecutor(max_workers=3) as pool:
        yield {"forkserver": pool.submit(_run, tmp_path_factory.mktemp("fs"), "forkserver", 2),
               # one loader: its two workers show that spawn imports torch again (each
               # spawned worker is 2-3 s of CPU importing torch)
               "spawn": pool.submit(_run, tmp_path_factory.mktemp("spawn"), "spawn", 1),
               "package": pool.submit(_run_package, tmp_path_factory.mktemp("pkg"))}


@pytest.mark.timeout(300)
def test_workers_fork_from_a_server_that_imported_torch(scripts: dict[str, Future]) -> None:
    pid, workers = scripts["forkserver"].result()
    assert len(workers) == 4  # two loaders of two workers
    assert all(already for already, _ in workers), workers  # torch came with the fork
    servers = {ppid for _, ppid in workers}
    assert len(servers) == 1 and pid not in servers  # one server shared by both loaders


@pytest.mark.timeout(300)
def test_spawn_workers_import_torch_again(scripts: dict[str, Future]) -> None:
    # the contrast that makes the test above mean something: spawn starts bare interpreters
    pid, workers = scripts["spawn"].result()
    assert len(workers) == 2 and not any(already for already, _ in workers)
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


def _run_package(tmp_path: Path) -> tuple[int, set[int]]:
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "userpkg.py").write_text(PACKAGE)
    script = tmp_path / "train.py"
    script.write_text(SCRIPT_WITH_PACKAGE)
    env = {**os.environ, "FL_OUT": os.fspath(out), "PYTHONPATH": os.fspath(ROOT / "src")}
    proc = subprocess.run([sys.executable, os.fspath(script)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return int(proc.stdout.split()[-1]), {int(f.name.split("-")[1]) for f in out.iterdir()}


@pytest.mark.timeout(300)
def test_the_server_imports_the_packages_the_dataset_comes_from(scripts: dict[str, Future]) -> None:
    # a torchvision ImageFolder (or a dataset holding a torchvision Compose) made every
    # worker of every loader import torchvision again: 2 s per loader on a busy host
    pid, importers = scripts["package"].result()
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
