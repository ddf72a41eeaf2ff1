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
from collections.abc import Callable

from ckptsel.errors import CkptselError
from ckptsel.trackers.base import (
    ALIAS,
    PREFIX,
    Logged,
    LogTarget,
    Payload,
    Registration,
    require,
    selection_file,
)

DEFAULT_PROJECT = "ckptsel"


def _run(wandb, target: LogTarget):
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
            project=project,
            name=target.new_run_name,
            group=target.run_name,
            job_type=PREFIX,
            tags=[PREFIX],
            **kwargs,
        )
    return run, True


def _log(wandb, run, payload: Payload) -> None:
    run.summary.update(payload.metrics)
    run.config.update(payload.params, allow_val_change=True)
    media = {}
    if payload.main_table is not None:
        media[f"{PREFIX}/main_table"] = wandb.Table(dataframe=payload.main_table)
    if payload.report is not None:
        media[f"{PREFIX}/report"] = wandb.Html(payload.report.read_text(encoding="utf-8"))
    for png in payload.figures:
        media[f"{PREFIX}/figures/{png.stem}"] = wandb.Image(str(png))
    if media:
        run.log(media)
    results = wandb.Artifact(
        f"{PREFIX}-results",
        type=f"{PREFIX}-results",
        description="ckptsel results: summary.json, tables, figures, report.html",
        metadata={"choices_sha256": payload.choices_sha256},
    )
    for path, folder in payload.files:
        results.add_file(str(path), name=f"{folder}/{path.name}".removeprefix(f"{PREFIX}/"))
    if payload.selection is not None:
        results.add_file(str(selection_file(payload.selection)), name="selection.json")
    run.log_artifact(results)


def register(wandb, run, reg: Registration, selection: dict) -> str:
    """A ``model`` artifact for the recommended checkpoint, with the aliases."""
    art = wandb.Artifact(
        reg.name, type="model", description=reg.description, metadata=dict(reg.tags)
    )
    if reg.checkpoint is not None:
        art.add_reference(reg.checkpoint.resolve().as_uri(), name="checkpoint", checksum=False)
    art.add_file(str(selection_file(selection)), name="selection.json")
    run.log_artifact(art, aliases=reg.aliases)
    return f"{reg.name}:{ALIAS}"


def log_wandb(
    payload: Payload,
    target: LogTarget,
    registration: Registration | None = None,
    note: Callable[[str], None] = print,
) -> Logged:
    """Log the payload to W&B (and register the recommended checkpoint)."""
    wandb = require("wandb")
    try:
        run, created = _run(wandb, target)
        try:
            _log(wandb, run, payload)
            registered = (
                register(wandb, run, registration, payload.selection or {})
                if registration
                else None
            )
            where = run.url or os.path.dirname(run.dir)
            run_id, run_name = run.id, run.name
        finally:
            if created:
                run.finish()
    except wandb.errors.Error as err:
        raise CkptselError(f"W&B: {err}") from err
    return Logged("wandb", run_id, run_name, where, registered)
