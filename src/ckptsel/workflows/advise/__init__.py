"""The practitioner's questions about one run, answered from its records.

* :mod:`~ckptsel.workflows.advise.selection` — ``ckptsel select``: which checkpoint to keep,
  with a gain estimate never scored on the items that made the choice (a typed
  :class:`Selection`); ``select --all``: every trajectory, with the table of which
  checkpoint to keep (:class:`StudySelection`, also ``summary.json``'s ``"keep"``);
* :mod:`~ckptsel.workflows.advise.comparison` — ``ckptsel compare``: is checkpoint A really
  better than B on the same items;
* :mod:`~ckptsel.workflows.advise.log_comparison` — ``ckptsel compare-logs``: the same paired
  comparison on two evaluation logs of any harness (per task, p-values adjusted across tasks);
* :mod:`~ckptsel.workflows.advise.planning` — ``ckptsel plan``: how many validation items a
  rule needs.

``__all__`` is what :mod:`ckptsel.workflows` serves of it to other stages; the helpers the
analysis shares with ``select`` (the keep table's settings, the NLL and degenerate lines, the
fallback shares) are imported from their modules.
"""

from __future__ import annotations

from ckptsel.workflows.advise.comparison import (
    CompareSettings,
    compare_checkpoints,
)
from ckptsel.workflows.advise.log_comparison import compare_logs
from ckptsel.workflows.advise.planning import (
    PlanSettings,
    closed_form,
    default_budgets,
    plan_figure,
    plan_from_pilot,
)
from ckptsel.workflows.advise.selection import (
    AnswerSettings,
    Selection,
    SelectSettings,
    StudySelection,
    select_all,
    select_checkpoint,
)

__all__ = [
    "AnswerSettings",
    "CompareSettings",
    "PlanSettings",
    "SelectSettings",
    "Selection",
    "StudySelection",
    "closed_form",
    "compare_checkpoints",
    "compare_logs",
    "default_budgets",
    "plan_figure",
    "plan_from_pilot",
    "select_all",
    "select_checkpoint",
]
