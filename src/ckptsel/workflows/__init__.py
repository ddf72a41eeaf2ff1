"""What a user runs, built from the stages: the analysis (``analyze``, ``verify``), the
practitioner's answers (``select``, ``compare``, ``plan``) and a whole study as one job
(``ckptsel run``).

* :mod:`~ckptsel.workflows.analysis` — records → frozen choices → test scores → statistics → a
  published results folder; ``verify`` recomputes it;
* :mod:`~ckptsel.workflows.advise` — one trajectory's recommendation, paired checkpoint
  comparison, validation-budget planning;
* :mod:`~ckptsel.workflows.tracking` — results and the recommendation logged to MLflow, W&B or
  Trackio (``--log``), the recommended checkpoint registered there (``--register``);
* :mod:`~ckptsel.workflows.watching` — a run still training, measured checkpoint by checkpoint
  with ``selection.json`` kept current (``ckptsel watch``);
* :mod:`~ckptsel.workflows.study_run` — a study's stages, resumable, optionally in worker
  processes.
"""

from __future__ import annotations

from ckptsel.workflows import advise
from ckptsel.workflows.advise import *  # noqa: F403 - its __all__: what workflows serves
from ckptsel.workflows.analysis import AnalysisEvents, AnalysisSettings, analyze, verify
from ckptsel.workflows.study_run import StudyRun, quiet_transformers, stages_to_run
from ckptsel.workflows.tracking import LogSettings, log_analysis, log_selection
from ckptsel.workflows.watching import describe, selection_path, watch_and_select

__all__ = [
    *advise.__all__,
    "AnalysisEvents",
    "AnalysisSettings",
    "LogSettings",
    "StudyRun",
    "analyze",
    "describe",
    "log_analysis",
    "log_selection",
    "quiet_transformers",
    "selection_path",
    "stages_to_run",
    "verify",
    "watch_and_select",
]
