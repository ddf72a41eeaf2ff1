"""The interop commands end to end, as a user types them, on logs the real harnesses wrote:
``ckptsel ingest inspect|lighteval`` → ``ckptsel analyze --log … --register …`` (and ``select``,
``run`` with a ``[log]`` table), read back with MLflow's, W&B's and Trackio's own stores offline
and compared with ``summary.json``.

The logs under ``tests/data/harness_logs`` were written by inspect-ai 0.3.285 and lighteval 0.13.0
(``scripts/make_harness_logs``). A tracker whose package is missing is skipped with its install
hint.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from ckptsel.cli.app import main
from ckptsel.records.scan import read_frame
from ckptsel.trackers.base import ALIAS

from offline_trackers import expected_metrics, import_mlflow, import_trackio, offline_env, wandb_run, wandb_runs

DATA = Path(__file__).parents[1] / "data" / "harness_logs"
EVALS = sorted((DATA / "inspect").glob("*.eval"))
DETAILS = DATA / "lighteval" / "details"
FAST = ["--permutations", "20", "--draws", "200", "--budgets", "4"]
SELECT_FAST = ["--partitions", "20", "--draws", "200", "--bootstrap-partitions", "5"]
MODEL = "tiny-sft"


def cli(args: list, capsys) -> tuple[int, str, str]:
    """``ckptsel ARGS`` in-process: (exit code, stdout, stderr)."""
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def ok(args: list, capsys) -> tuple[str, str]:
    code, out, err = cli(args, capsys)
    assert code == 0, f"ckptsel {' '.join(map(str, args))} exited {code}: {err}"
    return out, err


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """The offline stores test_trackers uses too (Trackio's folder is fixed at its import)."""
    root = tmp_path_factory.getbasetemp() / "trackers"
    with pytest.MonkeyPatch.context() as mp:
        yield SimpleNamespace(root=root, **offline_env(mp, root))


def check_against(logged: dict, summary: dict) -> None:
    """Every estimate of summary.json that the tracker holds equals it; the headline (the main
    rule's claims) is there."""
    want = expected_metrics(summary)
    assert {k: logged[k] for k in want if k in logged} == pytest.approx({k: v for k, v in want.items() if k in logged})
    for name in ("G/accuracy/full/mean", "G/accuracy/full/lo", "G/accuracy/full/hi", "D/accuracy/mean"):
        assert logged[f"ckptsel/{name}"] == pytest.approx(want[f"ckptsel/{name}"]), name


# --------------------------------------------------------------------------- ingest
def test_ingest_inspect_cli_says_what_is_missing_and_analyze_runs(tmp_path, capsys):
    code, _, err = cli(["ingest", "inspect", *EVALS, "--out", tmp_path / "r"], capsys)
    assert code == 2 and err.count("\n") == 1 and "--scorer" in err  # two scorers per sample
    assert not (tmp_path / "r").exists()
    out, err = ok(["ingest", "inspect", *EVALS, "--out", tmp_path / "r", "--scorer", "match"], capsys)
    assert "72 generation rows and 0 NLL rows (3 checkpoints, trajectory tiny-a, tiny-b)" in out
    [line] = err.splitlines()
    assert line.startswith("note: no matched NLL in these inspect logs") and "NLL rule" in line
    out, _ = ok(["analyze", tmp_path / "r", "--out", tmp_path / "res", *FAST, "--no-report"], capsys)
    summary = json.loads((tmp_path / "res" / "summary.json").read_text())
    assert summary["population"]["trajectories"] == 2 and not summary["population"]["nll_records"]
    assert summary["budget"]["accuracy"]["full"]["G"]["mean"] is not None


def test_ingest_inspect_steps_map_names_the_checkpoint(tmp_path, capsys):
    log = EVALS[0]
    args = ["ingest", "inspect", log, "--out", tmp_path / "r", "--scorer", "match"]
    ok([*args, "--trajectory", "mine", "--steps", f"{log.name}=7"], capsys)
    gen = read_frame(tmp_path / "r", "generations")
    assert set(gen["step"]) == {7} and set(gen["trajectory"]) == {"mine"}
    code, _, err = cli([*args, "--steps", "no-equals-sign"], capsys)
    assert code == 2 and "KEY=VALUE" in err and err.count("\n") == 1


def test_ingest_lighteval_cli_then_analyze(tmp_path, capsys):
    out, err = ok(["ingest", "lighteval", DETAILS, "--out", tmp_path / "r"], capsys)
    assert "(3 checkpoints, trajectory tiny-a, tiny-b)" in out
    assert "no matched NLL in these lighteval logs" in err
    ok(["analyze", tmp_path / "r", "--out", tmp_path / "res", *FAST, "--no-report"], capsys)
    summary = json.loads((tmp_path / "res" / "summary.json").read_text())
    assert summary["population"]["trajectories"] == 2


# --------------------------------------------------------------------------- --log
@pytest.fixture(scope="module")
def records(tmp_path_factory):
    folder = tmp_path_factory.mktemp("interop") / "records"
    main_args = ["ingest", "inspect", *map(str, EVALS), "--out", str(folder), "--scorer", "match"]
    try:
        main(main_args)
    except SystemExit as exc:
        assert not exc.code
    return folder


def test_analyze_log_three_trackers_and_register(records, stores, tmp_path, capsys):
    mlflow = import_mlflow()
    pytest.importorskip("wandb", reason="wandb not installed: pip install 'ckptsel[wandb]'")
    import_trackio(stores.root)
    from trackio.sqlite_storage import SQLiteStorage

    ok(["analyze", records, "--out", tmp_path / "plain", *FAST], capsys)
    sel_out, _ = ok(["select", records, "--trajectory", "tiny-a", "--json"], capsys)
    step = json.loads(sel_out)["recommendation"]["keep_step"]
    model = tmp_path / "runs" / "tiny-a" / f"checkpoint-{step}"  # --register needs a model there
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    out, _ = ok(
        [
            "analyze",
            records,
            "--out",
            tmp_path / "res",
            *FAST,
            "--log",
            "mlflow",
            "--log",
            "wandb",
            "--log",
            "trackio",
            "--register",
            MODEL,
            "--trajectory",
            "tiny-a",
            "--run-name",
            "sft-a",
            "--project",
            "interop",
            "--checkpoints",
            tmp_path / "runs",
        ],
        capsys,
    )
    # logging leaves the results folder as it is: summary.json byte for byte
    summary_bytes = (tmp_path / "res" / "summary.json").read_bytes()
    assert summary_bytes == (tmp_path / "plain" / "summary.json").read_bytes()
    summary = json.loads(summary_bytes)
    ids = dict(re.findall(r"^(\w+): logged to run \S+ \((\w+)\)", out, re.M))
    assert set(ids) == {"mlflow", "wandb", "trackio"}, out

    client = mlflow.MlflowClient(tracking_uri=stores.mlflow, registry_uri=stores.mlflow)
    run = client.get_run(ids["mlflow"])
    assert run.info.run_name == "ckptsel-sft-a"
    check_against(run.data.metrics, summary)
    assert run.data.params["ckptsel.choices_sha256"] == summary["choices_sha256"]
    version = client.get_model_version_by_alias(MODEL, ALIAS)
    assert version.run_id == ids["mlflow"] and version.tags["ckptsel.step"] == str(step)
    assert version.tags["ckptsel.trajectory"] == "tiny-a" and f"step {step}" in version.description

    [folder] = wandb_runs(stores.wandb, ids["wandb"])
    wb = wandb_run(folder)
    check_against(wb["summary"], summary)
    [model] = [a for a in wb["artifacts"] if a["name"] == MODEL]
    assert {ALIAS, f"step-{step}"} <= set(model["aliases"])

    rows = SQLiteStorage.get_logs("interop", "ckptsel-sft-a")
    check_against(next(r for r in rows if "ckptsel/G/accuracy/full/mean" in r), summary)
    [art] = [a for a in SQLiteStorage.list_artifacts("interop") if a["name"] == MODEL]
    assert {ALIAS, f"step-{step}"} <= set(art["versions"][-1]["aliases"])


def test_select_log_into_the_training_run_keeps_json_clean(records, stores, capsys):
    mlflow = import_mlflow()
    client = mlflow.MlflowClient(tracking_uri=stores.mlflow, registry_uri=stores.mlflow)
    exp = client.get_experiment_by_name("interop-train") or client.create_experiment("interop-train")
    train = client.create_run(exp if isinstance(exp, str) else exp.experiment_id, run_name="sft-b")
    client.set_terminated(train.info.run_id)
    out, err = ok(
        ["select", records, "--trajectory", "tiny-b", "--json", *SELECT_FAST, "--log", "mlflow", "--run-id", train.info.run_id], capsys
    )
    selection = json.loads(out)  # stdout is the JSON alone; the log line is on stderr
    assert f"({train.info.run_id})" in err
    run = client.get_run(train.info.run_id)
    sv = selection["rules"]["accuracy"]["split_validation"]
    assert run.data.metrics["ckptsel/select/accuracy/split_validation/mean"] == pytest.approx(sv["mean"])
    assert run.data.metrics["ckptsel/select/keep_step"] == selection["recommendation"]["keep_step"]


@pytest.mark.parametrize("tracker", ["mlflow", "wandb", "trackio"])
def test_a_missing_extra_is_one_line_before_any_work(records, tmp_path, capsys, monkeypatch, tracker):
    monkeypatch.setitem(sys.modules, tracker, None)  # import fails as if not installed
    code, _, err = cli(["analyze", records, "--out", tmp_path / "res", *FAST, "--log", tracker], capsys)
    assert code == 2 and err.count("\n") == 1 and f"pip install 'ckptsel[{tracker}]'" in err
    assert not (tmp_path / "res").exists()


def test_bad_log_options_are_one_line(records, tmp_path, capsys):
    base = ["analyze", records, "--out", tmp_path / "res", *FAST]
    for extra, needle in (
        (["--log", "tensorboard"], "unknown tracker"),
        (["--log", "mlflow", "--log", "wandb", "--run-id", "abc"], "TRACKER=ID"),
        (["--register", MODEL], "--register needs --log"),
        (["--log", "mlflow", "--register", "bad name"], "--register name"),
        # (with mlflow missing, the install hint comes first)
        *[(["--log", "mlflow", "--register", MODEL], "say whose checkpoint with --trajectory")]
        * (importlib.util.find_spec("mlflow") is not None),
    ):
        code, _, err = cli([*base, *extra], capsys)
        assert code == 2 and needle in err and err.count("\n") == 1, (extra, err)
    assert not (tmp_path / "res").exists()


# --------------------------------------------------------------------------- ckptsel run + [log]
def test_run_logs_where_the_log_table_says(stores, tmp_path, capsys):
    mlflow = import_mlflow()
    from lmevalcase import gsm8k_checkpoint

    for k, folder in enumerate(("a-s1", "a-s2", "b-s1", "b-s2")):
        for split in ("validation", "test"):
            for step in (100, 200):
                gsm8k_checkpoint(
                    tmp_path / "evals" / folder / split / f"checkpoint-{step}",
                    [f"#### {x}" for x in ("18", "1234", "5")],
                    [(step + k + i) % 3 != 0 for i in range(3)],
                )
    for name in ("val", "test"):
        (tmp_path / f"{name}.jsonl").write_text(
            "".join(json.dumps({"question": f"Ann has {i} pens. How many?", "answer": f"x\n#### {i}"}) + "\n" for i in range(6))
        )
    study = tmp_path / "s.toml"
    study.write_text(
        'schema = 2\n[study]\nbase_model = "base"\nseeds = [1]\n'
        '[validation]\ntask = "gsm8k"\nfile = "val.jsonl"\n[test]\ntask = "gsm8k"\nfile = "test.jsonl"\n'
        "[analysis]\npermutations = 20\ndraws = 200\nbudgets = [2]\n"
        '[log]\nto = ["mlflow"]\nproject = "interop-run"\n'  # lm-eval folders: no model to register
        'trajectory = "a-s1"\n'
        + "".join(f'[[configurations]]\nname = "{c}"\nlm_eval = "evals/{c}-s*"\nfilter = "strict-match"\n' for c in ("a", "b"))
    )
    out, _ = ok(["run", study], capsys)
    [run_id] = re.findall(r"log: mlflow: logged to run ckptsel \((\w+)\)", out)
    summary = json.loads((tmp_path / "results" / "summary.json").read_text())
    client = mlflow.MlflowClient(tracking_uri=stores.mlflow, registry_uri=stores.mlflow)
    check_against(client.get_run(run_id).data.metrics, summary)
    assert client.get_run(run_id).data.params["ckptsel.select.trajectory"] == "a-s1"
    bad = tmp_path / "bad.toml"
    bad.write_text(study.read_text().replace('project = "interop-run"', 'regster = "x"'))
    code, _, err = cli(["run", bad, "--dry-run"], capsys)
    assert code == 2 and "[log] regster" in err and "unknown key" in err
