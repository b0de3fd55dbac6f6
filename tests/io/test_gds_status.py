"""io='gds' on hosts where it cannot run: a kvikio that is installed but does not load, and
cuFile without the nvidia-fs driver, are said plainly (never a raw traceback, never "engaged")."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from feedline.errors import DeviceError
from feedline.io import gds_status, make_reader
from feedline.io._gds import _compat_mode_on, _gds_driver_available


@pytest.fixture
def broken_kvikio(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real package named kvikio whose import fails the way a missing libcufile does."""
    pkg = tmp_path / "kvikio"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        'raise OSError("libcufile.so.0: cannot open shared object file: No such file or directory")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "kvikio" or m.startswith("kvikio.")]:
        monkeypatch.delitem(sys.modules, name)


def test_a_kvikio_that_does_not_load_is_a_device_error_not_a_traceback(broken_kvikio: None) -> None:
    engaged, why = gds_status()
    assert not engaged and "does not load" in why and "libcufile" in why
    with pytest.raises(DeviceError) as e:
        make_reader("gds")
    assert "OSError" in e.value.message and "kvikio-cu13" in (e.value.fix or "")


def _kvikio(compat: bool, gds_available: object) -> SimpleNamespace:
    def get(name: str) -> object:
        if isinstance(gds_available, Exception):
            raise gds_available
        assert name == "is_gds_available"
        return gds_available

    return SimpleNamespace(__name__="kvikio",
                           defaults=SimpleNamespace(is_compat_mode_preferred=lambda: compat),
                           cufile_driver=SimpleNamespace(get=get))


def test_cufile_without_nvidia_fs_is_not_engaged() -> None:
    """The shape of kvikio 26.10's API (``defaults.is_compat_mode_preferred``,
    ``cufile_driver.get("is_gds_available")``); the real one needs CUDA (tests/gpu)."""
    assert _compat_mode_on(_kvikio(False, True))[0] is False
    assert _gds_driver_available(_kvikio(False, False)) is False
    assert _gds_driver_available(_kvikio(False, True)) is True
    assert _gds_driver_available(_kvikio(False, RuntimeError("cuFileDriverOpen failed"))) is None
