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

Every name is imported from the module that defines it; :mod:`ckptsel.workflows` serves the
front door's ``select_checkpoint``, ``compare_checkpoints``, … from these modules.
"""

from __future__ import annotations
