"""``import feedline`` and its lazy names: each resolves to the same object every time."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "feedline"


def test_wrap_callable_twice_in_a_fresh_process() -> None:
    # A fresh interpreter: the bug only shows on the first lookups of a process.
    code = (
        "import feedline, torch\n"
        "dl = [{'x': torch.arange(4)}, {'x': torch.arange(4, 8)}]\n"
        "a = feedline.wrap(dl)\n"
        "b = feedline.wrap(dl, device='cpu')\n"
        "c = feedline.wrap(dl, 'cpu', prefetch=1)\n"
        "assert callable(feedline.wrap), type(feedline.wrap)\n"
        "assert a.device.type == ('cuda' if torch.cuda.is_available() else 'cpu')\n"
        "assert [int(x['x'].sum()) for x in b] == [6, 22]\n"
        "assert len(list(c)) == 2\n"
        "import feedline.pipeline.wrapping\n"
        "assert callable(feedline.wrap) and callable(feedline.pipeline.wrap)\n"
        "print('ok')\n"
    )
    _prints_ok(code)


def _prints_ok(code: str) -> None:
    """Run ``code`` in a fresh interpreter (first lookups of a process) and expect 'ok'."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=SRC.parents[1])
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


@pytest.mark.parametrize("name", ["open_dataset", "Loader", "wrap", "watch", "FeedlineError"])
def test_lazy_names_resolve_to_the_same_callable(name: str) -> None:
    import feedline

    first = getattr(feedline, name)
    assert callable(first) and not inspect.ismodule(first)
    assert getattr(feedline, name) is first
    assert name in dir(feedline)


def test_unknown_name_is_attribute_error() -> None:
    import feedline

    with pytest.raises(AttributeError, match="no_such_thing"):
        feedline.no_such_thing  # noqa: B018


def _lazy_packages() -> list[Path]:
    return [p for p in SRC.rglob("__init__.py") if "_LAZY" in p.read_text(encoding="utf-8")]


@pytest.mark.parametrize("init", _lazy_packages(), ids=lambda p: p.parent.name)
def test_no_submodule_shares_a_lazy_name(init: Path) -> None:
    """A submodule named like a lazy attribute would replace it once imported."""
    package = ".".join(init.parent.relative_to(SRC.parent).parts)
    lazy = importlib.import_module(package)._LAZY
    clashes = [n for n in lazy if (init.parent / f"{n}.py").exists() or (init.parent / n).is_dir()]
    assert not clashes, f"{package}: rename the submodule(s) {clashes}"


def test_submodules_are_attributes_after_import_feedline() -> None:
    code = (
        "import sys, feedline\n"
        "t = feedline.vision.ImageTransform\n"
        "c = feedline.checkpoint.Checkpointer\n"
        "assert feedline.vision is sys.modules['feedline.vision'] and 'vision' in dir(feedline)\n"
        "print('ok')\n"
    )
    _prints_ok(code)
