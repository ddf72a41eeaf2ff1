"""MLflow: the headline estimates as run metrics (every estimate in ``ckptsel/metrics.csv`` and
``metrics.json``), settings and provenance as run params, the results as artifacts
(``ckptsel/…``), the main table as an MLflow table (``ckptsel/main_table.json``), and the
recommended checkpoint as a registered model version with alias ``ckptsel-recommended``.

Everything goes through :class:`mlflow.MlflowClient`, so logging into a finished training run
(``--run-id``, or the id the Trainer callback captured) leaves its status as it was. Without a
run id, a new run ``ckptsel-<run name>`` is created in the experiment (``--project``, else
``MLFLOW_EXPERIMENT_NAME``, else ``ckptsel``) with the tag ``ckptsel.training_run_name``.
MLflow params can never change: when a run is logged again after a new analysis, a setting whose
value changed is written as a tag of the same name (the params keep the first values).

The model version's source is the checkpoint folder's URI when the folder is known (the weights
are referenced, not copied), else the run's ``ckptsel`` artifacts. Needs ``mlflow-skinny`` (plus
``sqlalchemy`` and ``alembic`` for a ``sqlite:///`` store): ``pip install 'ckptsel[mlflow]'``.
"""

from __future__ import annotations

import os
import time

from ckptsel.errors import CkptselError
from ckptsel.trackers import base

BATCH_METRICS = 1000  # MLflow's per-request limits
BATCH_TAGS = 100  # params or tags
PARAM_LENGTH = 6000  # MLflow's longest param value
DEFAULT_EXPERIMENT = "ckptsel"


def _client(mlflow, uri: str):
    return mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)


def _experiment_id(client, name: str) -> str:
    exp = client.get_experiment_by_name(name)
    return exp.experiment_id if exp is not None else client.create_experiment(name)


def _run(mlflow, client, target: base.LogTarget) -> tuple[str, str, bool]:
    """(run id, run name, created here) of the run to log into."""
    if target.run_id:
        try:
            run = client.get_run(target.run_id)
        except mlflow.exceptions.MlflowException as err:
            raise CkptselError(f"MLflow run {target.run_id!r} not found: {err.message}") from err
        return run.info.run_id, run.info.run_name, False
    experiment = target.project or os.environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_EXPERIMENT
    tags = {f"{base.PREFIX}.training_run_name": target.run_name} if target.run_name else {}
    run = client.create_run(_experiment_id(client, experiment), run_name=target.new_run_name, tags=tags)
    return run.info.run_id, run.info.run_name, True


def _log_values(mlflow, client, run_id: str, payload: base.Payload) -> None:
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    metrics = [Metric(k, v, now, 0) for k, v in payload.metrics.items()]
    for i in range(0, len(metrics), BATCH_METRICS):
        client.log_batch(run_id, metrics=metrics[i : i + BATCH_METRICS])
    params, tags = _params_and_tags(client, run_id, payload)
    for i in range(0, len(params), BATCH_TAGS):
        client.log_batch(run_id, params=params[i : i + BATCH_TAGS])
    for i in range(0, len(tags), BATCH_TAGS):
        client.log_batch(run_id, tags=tags[i : i + BATCH_TAGS])


def _params_and_tags(client, run_id: str, payload: base.Payload) -> tuple[list, list]:
    """The settings as params; a param the run holds already with another value (a run logged
    again after a new analysis: MLflow params never change) goes as a tag of the same name."""
    from mlflow.entities import Param, RunTag

    held = client.get_run(run_id).data.params
    params, tags = [], []
    for k, v in payload.params.items():
        value = v[:PARAM_LENGTH]
        if k not in held:
            params.append(Param(k, value))
        elif held[k] != value:
            tags.append(RunTag(k, v[:8000]))
    return params, tags


def _log_files(client, run_id: str, payload: base.Payload) -> None:
    for path, folder in payload.files:
        client.log_artifact(run_id, str(path), artifact_path=folder)
    if payload.main_table is not None:
        client.log_table(run_id, data=payload.main_table, artifact_file=f"{base.PREFIX}/main_table.json")
    if payload.selection is not None:
        client.log_dict(run_id, payload.selection, f"{base.PREFIX}/selection.json")


def register(mlflow, client, run_id: str, reg: base.Registration) -> str:
    """A model version of ``reg.name`` for the recommended checkpoint, with the alias."""
    try:
        client.get_registered_model(reg.name)
    except mlflow.exceptions.MlflowException:
        client.create_registered_model(reg.name, description="checkpoints recommended by ckptsel")
    source = reg.checkpoint.resolve().as_uri() if reg.checkpoint else f"runs:/{run_id}/{base.PREFIX}"
    version = client.create_model_version(reg.name, source=source, run_id=run_id, description=reg.description, tags=reg.tags)
    client.set_registered_model_alias(reg.name, base.ALIAS, version.version)
    return f"{reg.name} version {version.version}"


def log_mlflow(job: base.LogJob) -> base.Logged:
    """Log the job's payload to MLflow (and register the recommended checkpoint)."""
    mlflow = base.require("mlflow")
    uri = job.target.tracking_uri or mlflow.get_tracking_uri()
    try:  # the client too: a store MLflow refuses (e.g. file://) fails as it is made
        client = _client(mlflow, uri)
        run_id, run_name, created = _run(mlflow, client, job.target)
        try:
            _log_values(mlflow, client, run_id, job.payload)
            _log_files(client, run_id, job.payload)
            registered = register(mlflow, client, run_id, job.registration) if job.registration else None
        finally:
            if created:
                client.set_terminated(run_id)
    except mlflow.exceptions.MlflowException as err:
        raise CkptselError(f"MLflow ({uri}): {' '.join(str(err.message).split())}") from err
    return base.Logged("mlflow", run_id, run_name, uri, registered)
