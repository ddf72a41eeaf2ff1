"""What a user runs, built from the stages: the analysis (``analyze``, ``verify``), the
practitioner's answers (``select``, ``compare``, ``plan``) and a whole study as one job
(``ckptsel run``).

* :mod:`~ckptsel.workflows.analysis` — records → frozen choices → test scores → statistics → a
  published results folder; ``verify`` recomputes it;
* :mod:`~ckptsel.workflows.advise` — one trajectory's recommendation, paired checkpoint
  comparison, validation-budget planning;
* :mod:`~ckptsel.workflows.study_run` — a study's stages, resumable, optionally in worker
  processes.
"""

from __future__ import annotations

from ckptsel.workflows.advise import (
    BudgetPick,
    CompareSettings,
    PlanSettings,
    Recommendation,
    RuleSelection,
    Selection,
    SelectSettings,
    SplitValidationGain,
    TestGain,
    closed_form,
    compare_checkpoints,
    default_budgets,
    plan_figure,
    plan_from_pilot,
    select_checkpoint,
)
from ckptsel.workflows.analysis import analyze, verify
from ckptsel.workflows.study_run import (
    STAGES,
    StudyRun,
    format_plan,
    quiet_transformers,
    stages_to_run,
)

__all__ = [
    "STAGES",
    "BudgetPick",
    "CompareSettings",
    "PlanSettings",
    "Recommendation",
    "RuleSelection",
    "SelectSettings",
    "Selection",
    "SplitValidationGain",
    "TestGain",
    "StudyRun",
    "analyze",
    "closed_form",
    "compare_checkpoints",
    "default_budgets",
    "format_plan",
    "plan_figure",
    "plan_from_pilot",
    "quiet_transformers",
    "select_checkpoint",
    "stages_to_run",
    "verify",
]
