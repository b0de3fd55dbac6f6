"""The pipeline stage model: analytic formulas and a discrete-event simulator.

Pure Python (numpy only for the simulator); importing it never touches torch.
"""

from feedline.model.analytic import (
    STAGES,
    PipelineAnalysis,
    analyze,
    pipeline_times,
    workers_needed,
)
from feedline.model.gds import GPUDirectStoragePipeline, check_alignment

__all__ = [
    "STAGES",
    "GPUDirectStoragePipeline",
    "PipelineAnalysis",
    "analyze",
    "check_alignment",
    "pipeline_times",
    "workers_needed",
]
