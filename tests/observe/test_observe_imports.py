"""The span sink is a leaf: the data path imports it without loading observe or torch."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["feedline.spans", "feedline.io", "feedline.format"])
def test_importing_the_data_path_does_not_load_observe(module: str) -> None:
    code = (f"import sys, {module}\n"
            "loaded = sorted(m for m in sys.modules if m.startswith('feedline.observe') or m == 'torch')\n"
            "print(','.join(loaded))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         check=True)
    assert out.stdout.strip() == "", f"import {module} loaded {out.stdout.strip()}"


def test_spans_imports_nothing_else_of_feedline() -> None:
    code = ("import sys, feedline.spans\n"
            "print(','.join(sorted(m for m in sys.modules if m.startswith('feedline.') "
            "and m != 'feedline.spans')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         check=True)
    assert out.stdout.strip() == ""
