"""Shared test configuration.

GPU tests live in tests/gpu and are collected only when FEEDLINE_GPU=1, which
bench/gpu_check.py sets on a machine with CUDA. They are not skipped silently:
the default run does not collect them at all, and the GPU script fails when
CUDA is missing.
"""

from __future__ import annotations

import os

collect_ignore = [] if os.environ.get("FEEDLINE_GPU") == "1" else ["gpu"]
