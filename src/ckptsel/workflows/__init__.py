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

from ckptsel.workflows.advise.comparison import compare_checkpoints
from ckptsel.workflows.advise.log_comparison import compare_logs
from ckptsel.workflows.advise.planning import plan_from_pilot
from ckptsel.workflows.advise.selection import Selection, StudySelection, select_all, select_checkpoint
from ckptsel.workflows.analysis import analyze, verify

__all__ = [
    "Selection",
    "StudySelection",
    "analyze",
    "compare_checkpoints",
    "compare_logs",
    "plan_from_pilot",
    "select_all",
    "select_checkpoint",
    "verify",
]
