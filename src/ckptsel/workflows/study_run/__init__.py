"""``ckptsel run STUDY.toml``: a whole study as one resumable job (see
:mod:`~ckptsel.workflows.study_run.job`)."""

from __future__ import annotations

from ckptsel.workflows.study_run.job import (
    STAGES,
    StudyRun,
    Trajectory,
    fingerprint_diff,
    format_plan,
    quiet_transformers,
    stages_to_run,
    trajectory_job,
)

__all__ = [
    "STAGES",
    "StudyRun",
    "Trajectory",
    "fingerprint_diff",
    "format_plan",
    "quiet_transformers",
    "stages_to_run",
    "trajectory_job",
]
