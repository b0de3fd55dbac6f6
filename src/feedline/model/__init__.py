"""The pipeline stage model: analytic formulas, GDS queue rules and a discrete-event simulator.

Pure Python (numpy only for the simulator); importing it never touches torch.
"""

from feedline.model.analytic import (
    STAGES,
    PipelineAnalysis,
    analyze,
    pipeline_times,
    workers_needed,
)
from feedline.model.distributions import (
    Constant,
    Distribution,
    Empirical,
    LogNormal,
    as_distribution,
    load_empirical,
    parse_dist,
)
from feedline.model.gds import GPUDirectStoragePipeline, check_alignment
from feedline.model.plan import Plan, plan_pipeline
from feedline.model.simulate import SimulationResult, simulate

__all__ = [
    "STAGES",
    "Constant",
    "Distribution",
    "Empirical",
    "GPUDirectStoragePipeline",
    "LogNormal",
    "PipelineAnalysis",
    "Plan",
    "SimulationResult",
    "analyze",
    "as_distribution",
    "check_alignment",
    "load_empirical",
    "parse_dist",
    "pipeline_times",
    "plan_pipeline",
    "simulate",
    "workers_needed",
]
