"""``ckptsel run STUDY.toml``: a whole study as one resumable job, stage functions over one
context. Modules, each importing only those before it:

* :mod:`~ckptsel.workflows.study_run.progress` — log lines, the live display, quiet transformers;
* :mod:`~ckptsel.workflows.study_run.context` — :class:`StudyContext`: the loaded study and what
  the stages derive from it (pools, measurement config, executor, trajectories), built once;
* :mod:`~ckptsel.workflows.study_run.fingerprint` — the settings recorded work depends on; a
  change that invalidates it is refused, with the difference;
* :mod:`~ckptsel.workflows.study_run.plan` — what is done and what is left, in one place: the
  trajectories ``--workers`` skips and the ``--dry-run`` table;
* :mod:`~ckptsel.workflows.study_run.stages` — ``prepare``, ``train``, ``measure``, ``analyze``;
* :mod:`~ckptsel.workflows.study_run.workers` — ``--workers N``: a trajectory per spawned process;
* :mod:`~ckptsel.workflows.study_run.job` — :class:`StudyRun`, the facade the CLI and the
  quickstart use.
"""

from __future__ import annotations

__all__: list[str] = []  # other stages import from the defining modules
