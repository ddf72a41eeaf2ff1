"""Weights & Biases: estimates in the run summary, settings and provenance in the run config, the
main table, ``report.html`` and the figures as media (``ckptsel/main_table``, ``ckptsel/report``,
``ckptsel/figures/<name>``), the results files as an artifact ``ckptsel-results``, and the
recommended checkpoint as a ``model`` artifact NAME with aliases ``ckptsel-recommended`` and
``step-<step>``.

Into a known run: the active run when its id is the one given (the Trainer callback's case: W&B's
own callback leaves the run open), else ``wandb.init(id=…, resume="allow")``. Without a run id, a
new run ``ckptsel-<run name>`` in the project (``--project``, else ``WANDB_PROJECT``, else
``ckptsel``), grouped with the training run (``group=<run name>``, ``job_type=ckptsel``).
Offline (``WANDB_MODE=offline``) everything is written to the local run folder for a later
``wandb sync``; the W&B Registry cannot be reached offline, so the alias on the logged artifact is
the registration. The checkpoint folder is added as a reference (its files are not uploaded).
Needs ``wandb``: ``pip install 'ckptsel[wandb]'``.
"""

from __future__ import annotations

import os

from ckptsel.errors import CkptselError
from ckptsel.trackers import base

DEFAULT_PROJECT = "ckptsel"


def _run(wandb, target: base.LogTarget):
    """(run, created here) of the run to log into."""
    active = wandb.run
    if active is not None and target.run_id and active.id == target.run_id:
        return active, False
    kwargs: dict = {"reinit": "create_new"} if active is not None else {}
    project = target.project or os.environ.get("WANDB_PROJECT") or DEFAULT_PROJECT
    if target.run_id:
        run = wandb.init(project=project, id=target.run_id, resume="allow", **kwargs)
    else:
        run = wandb.init(
            project=project, name=target.new_run_name, group=target.run_name, job_type=base.PREFIX, tags=[base.PREFIX], **kwargs
        )
    return run, True


def _log(wandb, run, payload: base.Payload) -> None:
    run.summary.update(payload.metrics)
    run.config.update(payload.params, allow_val_change=True)
    shown = base.media(
        payload,
        table=lambda df: wandb.Table(dataframe=df),
        html=lambda report: wandb.Html(report.read_text(encoding="utf-8")),
        image=lambda png: wandb.Image(str(png)),
    )
    if shown:
        run.log(shown)
    run.log_artifact(base.results_artifact(wandb.Artifact, payload))


def register(wandb, run, reg: base.Registration, selection: dict) -> str:
    """A ``model`` artifact for the recommended checkpoint, with the aliases."""
    run.log_artifact(base.model_artifact(wandb.Artifact, reg, selection), aliases=reg.aliases)
    return f"{reg.name}:{base.ALIAS}"


def log_wandb(job: base.LogJob) -> base.Logged:
    """Log the job's payload to W&B (and register the recommended checkpoint)."""
    wandb = base.require("wandb")
    reg = job.registration
    try:
        run, created = _run(wandb, job.target)
        try:
            _log(wandb, run, job.payload)
            registered = register(wandb, run, reg, job.payload.selection or {}) if reg else None
            where = run.url or os.path.dirname(run.dir)
            run_id, run_name = run.id, run.name or None  # offline, a resumed run has no name
        finally:
            if created:
                run.finish()
    except wandb.errors.Error as err:
        raise CkptselError(f"W&B: {err}") from err
    return base.Logged("wandb", run_id, run_name, where, registered)
