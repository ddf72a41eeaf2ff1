"""Results logged to MLflow, W&B and Trackio with the real libraries, offline, and read back with
each library's own client (W&B: its local transaction log) to compare with ``summary.json``.

MLflow: a SQLite store; W&B: offline mode; Trackio: its local store; all under a temporary folder
(``offline_trackers.offline_env``), with ``HOME`` pointed there too. A tracker whose package is
not installed is skipped with the install hint (``pip install 'ckptsel[mlflow]'`` …).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from ckptsel.errors import CkptselError
from ckptsel.results.estimate import fmt
from ckptsel.sim.simulate import write_simulation
from ckptsel.trackers.base import ALIAS, LogTarget, build_payload, registration, require
from ckptsel.trackers.log import log_results
from ckptsel.workflows.advise.selection import SelectSettings, select_checkpoint
from ckptsel.workflows.analysis import analyze

from offline_trackers import expected_metrics, import_mlflow, import_trackio, offline_env, wandb_run, wandb_runs

# its accuracy rule's split-validation gain is unresolved, so the final checkpoint is kept
TRAJ = "llama3-8b-lora8-commonsense-s42"
NAME = "my-model"


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("study")
    write_simulation(root / "records", "small", seed=0)
    analyze(root / "records", root / "results", permutations=20, draws=200, report=True)
    selection = select_checkpoint(
        root / "records", TRAJ, settings=SelectSettings(partitions=40, draws=200, bootstrap_partitions=5)
    ).to_dict()
    step = selection["recommendation"]["keep_step"]
    checkpoint = root / "runs" / TRAJ / f"checkpoint-{step}"
    checkpoint.mkdir(parents=True)
    (checkpoint / "config.json").write_text("{}")
    summary = json.loads((root / "results" / "summary.json").read_text())
    return SimpleNamespace(results=root / "results", selection=selection, summary=summary, checkpoint=checkpoint)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """One offline store per session (Trackio's folder is fixed when trackio is first imported)."""
    root = tmp_path_factory.getbasetemp() / "trackers"
    with pytest.MonkeyPatch.context() as mp:
        yield SimpleNamespace(root=root, **offline_env(mp, root))


def check_metrics(logged: dict, summary: dict) -> None:
    """A headline a person reads (at most 20 ckptsel metrics), each equal to summary.json; the
    three claims of the main rule are there with their intervals."""
    want = expected_metrics(summary)
    media = ("ckptsel/figures/", "ckptsel/report", "ckptsel/main_table")  # not metrics
    mine = {k: v for k, v in logged.items() if k.startswith("ckptsel/") and not k.startswith(media)}
    assert 9 <= len(mine) <= 20, sorted(mine)[9:]
    assert {k: v for k, v in mine.items() if k in want} == pytest.approx({k: want[k] for k in mine if k in want})
    for name in ("G/accuracy/full", "H/accuracy/full", "D/accuracy"):
        for stat in ("mean", "lo", "hi"):
            assert f"ckptsel/{name}/{stat}" in mine, name
    g = summary["budget"]["accuracy"]["full"]["G"]
    assert logged["ckptsel/G/accuracy/full/mean"] == pytest.approx(g["mean"])
    assert logged["ckptsel/G/accuracy/full/lo"] == pytest.approx(g["lo"])
    assert logged["ckptsel/D/accuracy/hi"] == pytest.approx(summary["D"]["accuracy"]["hi"])


def check_description(text: str, study) -> None:
    sel = study.selection
    sv = sel["rules"]["accuracy"]["split_validation"]
    assert sel["recommendation"]["keep_final"] and sv["unresolved"]  # what this trajectory shows
    assert "Final checkpoint kept because the gain is unresolved" in text
    assert f"{fmt(sv, unit=' pp', mark=False)} (95% interval, unresolved)" in text and f"step {sel['recommendation']['keep_step']}" in text
    assert study.summary["choices_sha256"] in text


# --------------------------------------------------------------------------- no tracker needed
def test_payload_names_every_estimate_and_the_evidence(study):
    payload = build_payload(study.results, study.selection)
    every = payload.all_metrics
    summary_only = {k: v for k, v in every.items() if not k.startswith("ckptsel/select/")}
    assert summary_only == pytest.approx(expected_metrics(study.summary))
    [path] = [p for p, _ in payload.files if p.name == "metrics.json"]
    assert json.loads(path.read_text()) == pytest.approx(every)  # the full table, as a file
    check_metrics(payload.metrics, study.summary)
    assert payload.params["ckptsel.choices_sha256"] == study.summary["choices_sha256"]
    assert payload.params["ckptsel.select.keep_step"] == str(study.selection["recommendation"]["keep_step"])
    assert len(payload.params["ckptsel.records_sha256"]) == 64
    names = {f"{folder}/{p.name}" for p, folder in payload.files}
    assert {
        "ckptsel/summary.json",
        "ckptsel/report.html",
        "ckptsel/choices/choices.sha256",
        "ckptsel/tables/main_table.csv",
        "ckptsel/figures/budget_curves_G.png",
    } <= names
    assert list(payload.main_table.columns) == ["rule", "quantity", "mean", "lo", "hi", "unresolved"]
    check_description(registration(payload, NAME, study.checkpoint).description, study)
    alone = build_payload(None, study.selection)  # `select --log`: no analysis, one trajectory
    assert alone.main_table is None and alone.summary is None
    assert {p.name for p, _ in alone.files} == {"metrics.csv", "metrics.json"}
    sv = study.selection["rules"]["accuracy"]["split_validation"]
    assert alone.metrics["ckptsel/select/accuracy/split_validation/lo"] == pytest.approx(sv["lo"])
    assert alone.metrics["ckptsel/select/keep_step"] == study.selection["recommendation"]["keep_step"]
    assert "Final checkpoint kept because the gain is unresolved" in registration(alone, NAME, study.checkpoint).description
    with pytest.raises(CkptselError, match="needs a recommendation"):
        registration(build_payload(study.results), NAME)
    with pytest.raises(CkptselError, match="--register name"):
        registration(payload, "no spaces")


@pytest.mark.parametrize(("tracker", "extra"), [("mlflow", "mlflow"), ("wandb", "wandb"), ("trackio", "trackio")])
def test_a_missing_tracker_is_one_line_with_the_install_hint(monkeypatch, tracker, extra):
    monkeypatch.setitem(sys.modules, tracker, None)  # import fails as if not installed
    with pytest.raises(CkptselError, match=rf"pip install 'ckptsel\[{extra}\]'"):
        require(tracker)
    with pytest.raises(CkptselError, match="unknown tracker"):
        log_results(Path("."), ["tensorboard"])


# --------------------------------------------------------------------------- MLflow
def test_mlflow_new_run_metrics_artifacts_and_registered_alias(study, stores, tmp_path):
    mlflow = import_mlflow()
    [logged] = log_results(
        study.results,
        ["mlflow"],
        selection=study.selection,
        register=NAME,
        checkpoint=study.checkpoint,
        targets={"mlflow": LogTarget(run_name="sft-train", project="exp-new")},
        note=lambda m: None,
    )
    client = mlflow.MlflowClient(tracking_uri=stores.mlflow, registry_uri=stores.mlflow)
    run = client.get_run(logged.run_id)
    assert run.info.run_name == "ckptsel-sft-train" and run.info.status == "FINISHED"
    assert run.data.tags["ckptsel.training_run_name"] == "sft-train"
    # settings are params (MLflow's Params tab), not tags
    assert run.data.params["ckptsel.choices_sha256"] == study.summary["choices_sha256"]
    assert "ckptsel.choices_sha256" not in run.data.tags
    check_metrics(run.data.metrics, study.summary)
    names = {a.path for a in client.list_artifacts(logged.run_id, "ckptsel")}
    assert {"ckptsel/summary.json", "ckptsel/report.html", "ckptsel/main_table.json", "ckptsel/metrics.csv", "ckptsel/choices.csv"} <= names
    back = mlflow.artifacts.download_artifacts(run_id=logged.run_id, artifact_path="ckptsel/summary.json", dst_path=str(tmp_path))
    assert json.loads(Path(back).read_text()) == study.summary
    version = client.get_model_version_by_alias(NAME, ALIAS)
    assert version.run_id == logged.run_id and version.source == study.checkpoint.resolve().as_uri()
    assert version.tags["ckptsel.step"] == str(study.selection["recommendation"]["keep_step"])
    assert version.tags["ckptsel.trajectory"] == TRAJ
    check_description(version.description, study)


def test_mlflow_a_selection_alone(study, stores):
    mlflow = import_mlflow()
    [logged] = log_results(
        None,
        ["mlflow"],
        selection=study.selection,
        register=NAME,
        checkpoint=study.checkpoint,
        targets={"mlflow": LogTarget(run_name=TRAJ, project="exp-select")},
        note=lambda m: None,
    )
    client = mlflow.MlflowClient(tracking_uri=stores.mlflow, registry_uri=stores.mlflow)
    run = client.get_run(logged.run_id)
    sv = study.selection["rules"]["accuracy"]["split_validation"]
    assert run.data.metrics["ckptsel/select/accuracy/split_validation/mean"] == pytest.approx(sv["mean"])
    assert run.data.params["ckptsel.select.rule"] == "accuracy"
    assert [a.path for a in client.list_artifacts(logged.run_id, "ckptsel")] == [
        "ckptsel/metrics.csv",
        "ckptsel/metrics.json",
        "ckptsel/selection.json",
    ]
    version = client.get_model_version_by_alias(NAME, ALIAS)
    assert version.run_id == logged.run_id and version.tags["ckptsel.trajectory"] == TRAJ


def test_mlflow_into_the_training_run_by_id(study, stores):
    mlflow = import_mlflow()
    client = mlflow.MlflowClient(tracking_uri=stores.mlflow, registry_uri=stores.mlflow)
    exp = client.get_experiment_by_name("exp-train") or client.create_experiment("exp-train")
    exp_id = exp if isinstance(exp, str) else exp.experiment_id
    train = client.create_run(exp_id, run_name="sft-train")
    client.log_metric(train.info.run_id, "train/loss", 1.5, step=80)
    client.set_terminated(train.info.run_id)
    [logged] = log_results(
        study.results,
        ["mlflow"],
        selection=study.selection,
        register=NAME,
        checkpoint=study.checkpoint,
        targets={"mlflow": LogTarget(run_id=train.info.run_id)},
        note=lambda m: None,
    )
    run = client.get_run(train.info.run_id)
    assert logged.run_id == train.info.run_id and run.info.status == "FINISHED"
    assert run.data.metrics["train/loss"] == 1.5
    check_metrics(run.data.metrics, study.summary)
    version = client.get_model_version_by_alias(NAME, ALIAS)  # the newest version carries the alias
    assert version.run_id == train.info.run_id
    assert version.source == study.checkpoint.resolve().as_uri()  # the model, never the results
    with pytest.raises(CkptselError, match="MLflow run 'nope' not found"):
        log_results(study.results, ["mlflow"], targets={"mlflow": LogTarget(run_id="nope")}, note=lambda m: None)


# --------------------------------------------------------------------------- W&B
def test_wandb_offline_summary_media_and_model_artifact(study, stores):
    pytest.importorskip("wandb", reason="wandb not installed: pip install 'ckptsel[wandb]'")
    [logged] = log_results(
        study.results,
        ["wandb"],
        selection=study.selection,
        register=NAME,
        checkpoint=study.checkpoint,
        targets={"wandb": LogTarget(run_name="sft-train", project="ckptsel-test")},
        note=lambda m: None,
    )
    [folder] = wandb_runs(stores.wandb, logged.run_id)
    run = wandb_run(folder)
    assert run["run"]["name"] == "ckptsel-sft-train" and run["run"]["group"] == "sft-train"
    check_metrics(run["summary"], study.summary)
    assert run["config"]["ckptsel.choices_sha256"] == study.summary["choices_sha256"]
    media = {k.split("/")[1] for h in run["history"] for k in h if k.startswith("ckptsel/")}
    assert {"main_table", "report", "figures"} <= media
    arts = {a["name"]: a for a in run["artifacts"]}
    staged = Path(arts["ckptsel-results"]["files"]["summary.json"])
    assert json.loads(staged.read_text()) == study.summary
    model = arts[NAME]
    assert model["type"] == "model" and ALIAS in model["aliases"]
    assert f"step-{study.selection['recommendation']['keep_step']}" in model["aliases"]
    assert model["metadata"]["ckptsel.trajectory"] == TRAJ
    # the checkpoint is referenced where it is, not uploaded
    assert model["files"]["checkpoint/config.json"] == (study.checkpoint / "config.json").resolve().as_uri()
    check_description(model["description"], study)


def test_wandb_into_the_training_run_by_id(study, stores):
    wandb = pytest.importorskip("wandb", reason="wandb not installed: pip install 'ckptsel[wandb]'")
    train = wandb.init(project="ckptsel-test", name="sft-train")
    train.log({"train/loss": 1.5})
    train_id = train.id
    train.finish()
    [logged] = log_results(
        study.results, ["wandb"], targets={"wandb": LogTarget(run_id=train_id, project="ckptsel-test")}, note=lambda m: None
    )
    assert logged.run_id == train_id
    line = logged.line()  # the run named (issue 39: it said "logged to run None")
    assert "None" not in line and train_id in line and line.startswith("wandb: logged to run ")
    first, resumed = wandb_runs(stores.wandb, train_id)  # offline, a resumed run is a second folder
    assert "train/loss" in wandb_run(first)["history"][0]
    check_metrics(wandb_run(resumed)["summary"], study.summary)


# --------------------------------------------------------------------------- Trackio
def test_trackio_local_metrics_media_and_registry(study, stores):
    trackio = import_trackio(stores.root)
    from trackio.sqlite_storage import SQLiteStorage

    [logged] = log_results(
        study.results,
        ["trackio"],
        selection=study.selection,
        register=NAME,
        checkpoint=study.checkpoint,
        targets={"trackio": LogTarget(run_name="sft-train", project="ckptsel-test")},
        note=lambda m: None,
    )
    assert logged.run_name == "ckptsel-sft-train"
    rows = SQLiteStorage.get_logs("ckptsel-test", "ckptsel-sft-train")
    [metrics] = [r for r in rows if "ckptsel/G/accuracy/full/mean" in r]
    check_metrics(metrics, study.summary)
    assert any("ckptsel/main_table" in r and "ckptsel/report" in r for r in rows)
    config = SQLiteStorage.get_run_config("ckptsel-test", "ckptsel-sft-train")
    assert config["ckptsel.choices_sha256"] == study.summary["choices_sha256"]
    [link] = trackio.Api().registry("models").collection(NAME).links
    assert ALIAS in link["aliases"]
    [model] = [a for a in SQLiteStorage.list_artifacts("ckptsel-test") if a["name"] == NAME]
    assert model["type"] == "model" and {ALIAS, f"step-{study.selection['recommendation']['keep_step']}"} <= set(
        model["versions"][0]["aliases"]
    )
    check_description(model["description"], study)


def test_trackio_into_the_training_run_by_name(study, stores):
    trackio = import_trackio(stores.root)
    from trackio.sqlite_storage import SQLiteStorage

    trackio.init(project="ckptsel-train", name="sft-run", auto_log_cpu=False, auto_log_gpu=False)
    trackio.log({"train/loss": 1.5})
    trackio.finish()
    [logged] = log_results(
        study.results, ["trackio"], targets={"trackio": LogTarget(run_id="sft-run", project="ckptsel-train")}, note=lambda m: None
    )
    assert logged.run_name == "sft-run" and logged.line().startswith("trackio: logged to run sft-run (")
    rows = SQLiteStorage.get_logs("ckptsel-train", "sft-run")
    assert rows[0]["train/loss"] == 1.5
    check_metrics(next(r for r in rows if "ckptsel/G/accuracy/full/mean" in r), study.summary)
    with pytest.raises(CkptselError, match="no run 'nope'"):
        log_results(study.results, ["trackio"], targets={"trackio": LogTarget(run_id="nope", project="ckptsel-train")}, note=lambda m: None)


def test_an_estimate_without_an_interval_is_logged_as_not_estimable():
    """Issue 29: one configuration has no configuration interval; a tracker must not get lo = hi =
    mean (a zero-width interval that reads resolved), but the mean and not_estimable = 1."""
    from ckptsel.trackers.base import evidence, summary_metrics

    one = {"mean": 1.78, "lo": None, "hi": None, "unresolved": True, "not_estimable": "1 configuration"}
    m = summary_metrics({"D": {"accuracy": one}})
    assert m == {"ckptsel/D/accuracy/mean": 1.78, "ckptsel/D/accuracy/unresolved": 1.0, "ckptsel/D/accuracy/not_estimable": 1.0}
    sel = {
        "recommendation": {"rule": "accuracy", "keep_step": 4, "keep_final": True, "reason": "r"},
        "trajectory": "t",
        "final_step": 4,
        "settings": {"level": 0.95},
        "rules": {"accuracy": {"choice": {"steps": [2]}, "split_validation": one}},
    }
    text = evidence(sel)
    assert "+1.78 pp not estimable: 1 configuration (no interval)" in text and "[" not in text


# --------------------------------------------------------------------------- what a person reads
def test_analyze_headline_logs_the_choices_and_the_full_table_as_files(study):
    """Without a selection: the claims, and the main rule's chosen step per trajectory at the
    full budget summarized (the simulation has many trajectories); choices.csv holds each."""
    import pandas as pd

    payload = build_payload(study.results)
    assert len(payload.metrics) <= 20
    n = study.summary["population"]["trajectories"]
    assert n > 20 - 9  # more than fit beside the claims: summarized
    assert payload.metrics["ckptsel/choices/accuracy/trajectories"] == n
    assert 0.0 <= payload.metrics["ckptsel/choices/accuracy/final_fraction"] <= 1.0
    [path] = [p for p, _ in payload.files if p.name == "choices.csv"]
    choices = pd.read_csv(path)
    assert list(choices.columns) == ["trajectory", "rule", "step", "prob", "final"]
    assert set(choices["rule"]) >= {"accuracy", "agreement"}
    assert not choices.duplicated(["trajectory", "rule"]).any()
    frozen = pd.read_parquet(study.results / "choices" / "choices.parquet")
    full = frozen[(frozen["budget"] == "full") & (frozen["scheme"] == "nested")]
    row = choices.iloc[0]
    steps = full[(full["trajectory"] == row["trajectory"]) & (full["rule"] == row["rule"])]
    assert row["step"] == steps.sort_values("prob", ascending=False)["step"].iloc[0]


def test_register_refuses_a_folder_that_holds_no_model(study, tmp_path):
    payload = build_payload(None, study.selection)
    with pytest.raises(CkptselError, match="no checkpoint folder .* no model to register"):
        registration(payload, NAME)
    empty = tmp_path / "checkpoint-empty"
    empty.mkdir()
    (empty / "selection.json").write_text("{}")
    with pytest.raises(CkptselError, match="holds no model"):
        registration(payload, NAME, empty)
    with pytest.raises(CkptselError, match="checkpoint folder not found"):
        registration(payload, NAME, tmp_path / "absent")
    weights = tmp_path / "weights-only"
    weights.mkdir()
    (weights / "adapter_model.safetensors").write_bytes(b"")
    assert registration(payload, NAME, weights).checkpoint == weights


def test_results_artifact_says_what_it_holds(study):
    from ckptsel.trackers.base import artifact_description

    alone = artifact_description(build_payload(None, study.selection))
    assert "summary.json" not in alone and "report.html" not in alone
    assert "selection.json" in alone
    full = artifact_description(build_payload(study.results, study.selection))
    assert "summary.json" in full and "report.html" in full and "choices.csv" in full
