"""Trackio: estimates as one row of metrics, settings and provenance in the run config, the main
table, ``report.html`` and the figures as media (``ckptsel/main_table``, ``ckptsel/report``,
``ckptsel/figures/<name>``), the results files as an artifact ``ckptsel-results``, and the
recommended checkpoint as a ``model`` artifact NAME with aliases ``ckptsel-recommended`` and
``step-<step>``, linked into Trackio's local registry ``models`` (collection NAME, same alias).

Trackio resumes runs by name, so the run to log into is named (``--run-id`` is the run's name;
the Trainer callback captures it): ``trackio.init(name=…, resume="must")``. Without one, a new run
``ckptsel-<run name>`` grouped with the training run. Project: ``--project``, else ``ckptsel``
(the Trainer's default is ``huggingface``: the callback passes its own). The store is Trackio's
local one (``TRACKIO_DIR``, read when trackio is imported); nothing leaves the machine unless a
Space or server is configured. Needs ``trackio``: ``pip install 'ckptsel[trackio]'``.
"""

from __future__ import annotations

from ckptsel.errors import CkptselError
from ckptsel.trackers import base

DEFAULT_PROJECT = "ckptsel"
REGISTRY = "models"


def _init(trackio, target: base.LogTarget, project: str, config: dict):
    quiet = {"auto_log_cpu": False, "auto_log_gpu": False}
    if target.run_id:
        try:
            return trackio.init(project=project, name=target.run_id, resume="must", config=config, **quiet)
        except ValueError as err:
            raise CkptselError(f"Trackio: no run {target.run_id!r} in project {project!r} ({err})") from err
    return trackio.init(project=project, name=target.new_run_name, group=target.run_name, config=config, **quiet)


def _log(trackio, payload: base.Payload) -> None:
    trackio.log(dict(payload.metrics))
    shown = base.media(
        payload,
        table=lambda df: trackio.Table(dataframe=df),
        html=lambda report: trackio.Html(str(report)),
        image=lambda png: trackio.Image(str(png)),
    )
    if shown:
        trackio.log(shown)
    trackio.log_artifact(base.results_artifact(trackio.Artifact, payload))


def register(trackio, run, reg: base.Registration, selection: dict) -> str:
    """A ``model`` artifact with the aliases, linked into the local registry ``models``."""
    art = base.model_artifact(trackio.Artifact, reg, selection)
    logged = trackio.log_artifact(art, aliases=reg.aliases)
    try:
        trackio.Api().create_registry(REGISTRY, description="checkpoints recommended by ckptsel")
    except ValueError:
        pass  # it exists already (registries are never created implicitly)
    run.link_artifact(logged, f"registry-{REGISTRY}/{reg.name}", aliases=[base.ALIAS])
    return f"{reg.name}:{base.ALIAS}"


def log_trackio(job: base.LogJob) -> base.Logged:
    """Log the job's payload to Trackio (and register the recommended checkpoint)."""
    trackio = base.require("trackio")
    from trackio import utils

    project = job.target.project or DEFAULT_PROJECT
    run = _init(trackio, job.target, project, dict(job.payload.params))
    reg = job.registration
    try:
        _log(trackio, job.payload)
        registered = register(trackio, run, reg, job.payload.selection or {}) if reg else None
    finally:
        trackio.finish()
    return base.Logged("trackio", str(run.id), str(run.name) if run.name else None, f"{utils.TRACKIO_DIR} (project {project})", registered)
