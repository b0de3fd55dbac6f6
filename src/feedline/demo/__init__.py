"""``feedline demo``: a synthetic driving log, a naive loader vs feedline, measured.

Torch loads only when a run starts (``run_demo``), not at import.
"""

from feedline.demo.story import DemoConfig, DemoResult, default_workers, run_demo
from feedline.demo.synth import SynthConfig, decode_camera_tag, make_driving_log

__all__ = [
    "DemoConfig",
    "DemoResult",
    "SynthConfig",
    "decode_camera_tag",
    "default_workers",
    "make_driving_log",
    "run_demo",
]
