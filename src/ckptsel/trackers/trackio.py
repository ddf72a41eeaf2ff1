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
REGISTRY = "models"


def _init(trackio, target: LogTarget, project: str, config: dict):
    quiet = {"auto_log_cpu": False, "auto_log_gpu": False}
    if target.run_id:
        try:
            return trackio.init(
                project=project, name=target.run_id, resume="must", config=config, **quiet
            )
        except ValueError as err:
            raise CkptselError(
                f"Trackio: no run {target.run_id!r} in project {project!r} ({err})"
            ) from err
    return trackio.init(
        project=project, name=target.new_run_name, group=target.run_name, config=config, **quiet
    )


def _log(trackio, payload: Payload) -> None:
    trackio.log(dict(payload.metrics))
    media = {}
    if payload.main_table is not None:
        media[f"{PREFIX}/main_table"] = trackio.Table(dataframe=payload.main_table)
    if payload.report is not None:
        media[f"{PREFIX}/report"] = trackio.Html(str(payload.report))
    for png in payload.figures:
        media[f"{PREFIX}/figures/{png.stem}"] = trackio.Image(str(png))
    if media:
        trackio.log(media)
    results = trackio.Artifact(
        f"{PREFIX}-results",
        type=f"{PREFIX}-results",
        description="ckptsel results: summary.json, tables, figures, report.html",
        metadata={"choices_sha256": payload.choices_sha256},
    )
    for path, folder in payload.files:
        results.add_file(str(path), name=f"{folder}/{path.name}".removeprefix(f"{PREFIX}/"))
    if payload.selection is not None:
        results.add_file(str(selection_file(payload.selection)), name="selection.json")
    trackio.log_artifact(results)


def register(trackio, run, reg: Registration, selection: dict) -> str:
    """A ``model`` artifact with the aliases, linked into the local registry ``models``."""
    art = trackio.Artifact(
        reg.name, type="model", description=reg.description, metadata=dict(reg.tags)
    )
    if reg.checkpoint is not None:
        art.add_reference(reg.checkpoint.resolve().as_uri(), name="checkpoint", checksum=False)
    art.add_file(str(selection_file(selection)), name="selection.json")
    logged = trackio.log_artifact(art, aliases=reg.aliases)
    try:
        trackio.Api().create_registry(REGISTRY, description="checkpoints recommended by ckptsel")
    except ValueError:
        pass  # it exists already (registries are never created implicitly)
    run.link_artifact(logged, f"registry-{REGISTRY}/{reg.name}", aliases=[ALIAS])
    return f"{reg.name}:{ALIAS}"


def log_trackio(
    payload: Payload,
    target: LogTarget,
    registration: Registration | None = None,
    note: Callable[[str], None] = print,
) -> Logged:
    """Log the payload to Trackio (and register the recommended checkpoint)."""
    trackio = require("trackio")
    from trackio import utils

    project = target.project or DEFAULT_PROJECT
    run = _init(trackio, target, project, dict(payload.params))
    try:
        _log(trackio, payload)
        registered = (
            register(trackio, run, registration, payload.selection or {}) if registration else None
        )
    finally:
        trackio.finish()
    return Logged(
        "trackio",
        str(run.id),
        str(run.name),
        f"{utils.TRACKIO_DIR} (project {project})",
        registered,
    )
