"""Test folders are plain rootdir folders (tests import sibling helpers by name),
so two test modules with the same basename would shadow each other."""

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).parent


def test_test_module_basenames_are_unique():
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert not [n for n, c in names.items() if c > 1], "rename: test basenames must be unique"


def test_helper_module_basenames_are_unique():
    helpers = [p for p in TESTS.rglob("*.py") if not p.name.startswith(("test_", "conftest"))
               and "scripts" not in p.parts]
    names = Counter(p.name for p in helpers)
    assert not [n for n, c in names.items() if c > 1]
