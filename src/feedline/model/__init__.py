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

__all__ = ["STAGES", "PipelineAnalysis", "analyze", "pipeline_times", "workers_needed"]
