"""diagnose with a command whose Python is not feedline's (a bare ``python`` from another
environment): a clear error naming that interpreter, never a silently unmeasured run."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

import pytest

from feedline.errors import ConfigError
from feedline.observe.diagnose import run_diagnose


@pytest.fixture(scope="module")
def other_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real second environment without feedline's dependencies (no psutil, no torch)."""
    root = tmp_path_factory.mktemp("bare-env")
    venv.EnvBuilder(with_pip=False, symlinks=True).create(root)
    probe = subprocess.run([str(root / "bin" / "python"), "-c", "import psutil"], capture_output=True)
    if probe.returncode == 0:
        pytest.fail("the bare environment sees psutil: it would not be another environment")
    return root / "bin"


@pytest.mark.timeout(120)
def test_a_bare_python_from_another_environment_is_refused_before_the_run(
        other_python: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{other_python}:{Path(sys.executable).parent}:/usr/bin:/bin")
    marker = tmp_path / "ran"
    with pytest.raises(ConfigError, match="cannot load feedline's measuring hook") as e:
        run_diagnose(["python", "-c", f"open({str(marker)!r}, 'w')"])
    assert str(other_python) in str(e.value) and sys.executable in (e.value.fix or "")
    assert not marker.exists()  # refused before any of the user's work ran


@pytest.mark.timeout(120)
def test_a_wrapper_starting_another_python_says_the_run_was_unmeasured(
        other_python: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{other_python}:/usr/bin:/bin")
    marker = tmp_path / "ran"
    with pytest.raises(ConfigError, match="ran unmeasured") as e:
        run_diagnose(["bash", "-c", f"python -c \"open({str(marker)!r}, 'w')\""])
    assert "psutil" in str(e.value) or "feedline" in str(e.value)
    assert marker.exists()  # the user's command itself ran
