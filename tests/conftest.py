"""Shared test configuration.

GPU tests live in tests/gpu and are collected only when FEEDLINE_GPU=1, which
bench/gpu_check.py sets on a machine with CUDA. They are not skipped silently:
the default run does not collect them at all, and the GPU script fails when
CUDA is missing.

Hypothesis runs derandomized by default, so CI sees the same examples on
every run; ``HYPOTHESIS_PROFILE=explore`` draws fresh random examples (run it
locally after touching a property-tested module, and pin what it finds with
``@example`` or a plain regression test).
"""

from __future__ import annotations

import os

collect_ignore = [] if os.environ.get("FEEDLINE_GPU") == "1" else ["gpu"]


import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

settings.register_profile("deterministic", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))


@pytest.fixture(autouse=True)
def _no_leaked_span_sinks():
    """A test that leaves a span sink installed would skew every later test's timings."""
    yield
    from feedline import spans

    leaked = list(spans._sinks)
    if leaked:
        spans._sinks.clear()
        pytest.fail(f"the test left span sinks installed: {leaked}")
