"""inspect_ai and lighteval logs → records → ``analyze``, on logs the real harnesses wrote.

The logs under ``tests/data/harness_logs`` were written by inspect-ai 0.3.285 and lighteval 0.13.0
on tiny local checkpoints (``scripts/make_harness_logs``; README there). Neither harness is needed
to read them; where inspect_ai is installed, its own reader is compared with ckptsel's.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from ckptsel.errors import CkptselError
from ckptsel.ingest.inspect import ingest_inspect, read_inspect_log
from ckptsel.ingest.lighteval import ingest_lighteval
from ckptsel.ingest.mapping import CheckpointLog, ingest_logs
from ckptsel.records.scan import read_frame
from ckptsel.records.store import upsert_records
from ckptsel.workflows.analysis import analyze

DATA = Path(__file__).parents[1] / "data" / "harness_logs"
INSPECT = DATA / "inspect"
DETAILS = DATA / "lighteval" / "details"
EVALS = sorted(INSPECT.glob("*.eval"))
[JSON_LOG] = sorted(INSPECT.glob("*.json"))
ITEMS = 12  # 8 validation (q01, q01b: one group) + 4 test
QUIET = {"note": lambda m: None}


def _log_of(trajectory: str, step: int) -> Path:
    for p in EVALS:
        ev = read_inspect_log(p)[0]["eval"]
        if ev["model"].endswith(f"/{trajectory}/checkpoint-{step}"):
            return p
    raise AssertionError(f"no log for {trajectory}/{step}")


def _records_bytes(folder: Path) -> dict:
    return {
        p.relative_to(folder): p.read_bytes()
        for p in sorted(folder.rglob("*.parquet"))
        if ".cache" not in p.parts and ".parts" not in p.parts
    }


def _analyze(records: Path, out: Path) -> dict:
    return analyze(records, out, permutations=20, draws=200, budgets=(4,)).to_dict()


def _keep(out: Path) -> None:
    """Records of another trajectory, which a failed ingest must leave byte for byte."""
    row = {
        "trajectory": "keep",
        "configuration": "k",
        "task": "gsm8k",
        "step": 1,
        "split": "test",
        "item_id": "x",
        "group": "x",
        "subtask": "",
        "answer": "",
        "correct": False,
    }
    upsert_records(out, generations=pd.DataFrame([row]))


# --------------------------------------------------------------------------- inspect
@pytest.fixture(scope="module")
def inspect_records(tmp_path_factory):
    out = tmp_path_factory.mktemp("inspect") / "records"
    notes: list[str] = []
    ingested = ingest_inspect(EVALS, out=out, scorer="match", note=notes.append)
    return out, ingested, notes


def test_inspect_logs_become_records(inspect_records):
    out, ingested, notes = inspect_records
    gen = read_frame(out, "generations")
    assert len(gen) == len(ingested.generations) == 2 * 3 * ITEMS
    assert set(gen["trajectory"]) == {"tiny-a", "tiny-b"}  # metadata / the model path
    assert set(gen["step"]) == {0, 40, 80} and set(gen["task"]) == {"tiny_gsm"}
    assert set(gen["subtask"]) == {""} and (gen["configuration"] == gen["trajectory"]).all()
    per_split = gen.groupby(["trajectory", "step", "split"]).size()
    assert set(per_split.xs("validation", level="split")) == {8}
    assert set(per_split.xs("test", level="split")) == {4}
    g = gen.set_index(["trajectory", "step", "item_id"])
    assert g.loc[("tiny-a", 80, "q01b"), "group"] == "g01" and g.loc[("tiny-a", 80, "q02"), "group"] == "q02"
    assert gen["text"].notna().all()
    # the mapped rows say what the harness said: per sample, and in the log's own accuracy
    for path in EVALS:
        header, samples = read_inspect_log(path)
        ev = header["eval"]
        traj = ev.get("metadata", {}).get("trajectory") or ev["model"].split("/")[-2]
        step = int(ev["model"].rsplit("-", 1)[1])
        rows = gen[(gen["trajectory"] == traj) & (gen["step"] == step)].set_index("item_id")
        for s in samples:
            score = s["scores"]["match"]
            assert rows.loc[s["id"], "answer"] == score["answer"]
            assert bool(rows.loc[s["id"], "correct"]) == (score["value"] == "C")
            assert rows.loc[s["id"], "text"] == s["output"]["completion"]
        [acc] = [sc["metrics"]["accuracy"]["value"] for sc in header["results"]["scores"] if sc["name"] == "match"]
        assert rows["correct"].mean() == pytest.approx(acc)
    assert gen["correct"].any() and not gen["correct"].all()
    assert notes == []


def test_inspect_says_what_is_missing_and_analyze_runs_the_other_rules(inspect_records, tmp_path):
    out, ingested, _ = inspect_records
    [line] = ingested.unavailable
    assert "no matched NLL" in line and "inspect" in line and "NLL rule" in line
    summary = _analyze(out, tmp_path / "results")
    assert summary["population"]["trajectories"] == 2 and not summary["population"]["nll_records"]
    assert any("no validation NLL records" in w for w in summary["warnings"])
    assert set(summary["budget"]) == {"accuracy", "agreement", "last"}
    assert set(summary["budget"]["accuracy"]) == {"4", "full"}
    assert (tmp_path / "results" / "summary.json").is_file()


def test_json_log_gives_the_same_rows_as_the_eval_log(tmp_path):
    rows = []
    for log in (_log_of("tiny-b", 80), JSON_LOG):
        out = tmp_path / log.suffix.lstrip(".")
        rows.append(ingest_inspect([log], out=out, scorer="last_number", **QUIET).generations)
    assert len(rows[0]) == ITEMS
    pd.testing.assert_frame_equal(rows[0], rows[1])


def test_reader_agrees_with_inspect_ai():
    log_api = pytest.importorskip("inspect_ai.log", reason="inspect_ai not installed")
    for path in [*EVALS, JSON_LOG]:
        theirs = log_api.read_eval_log(str(path))
        header, samples = read_inspect_log(path)
        assert header["eval"]["model"] == theirs.eval.model and header["status"] == theirs.status
        mine = {s["id"]: s for s in samples}
        assert set(mine) == {s.id for s in theirs.samples}
        for s in theirs.samples:
            assert mine[s.id]["output"]["completion"] == s.output.completion
            for name, score in s.scores.items():
                assert mine[s.id]["scores"][name]["value"] == score.value
                assert mine[s.id]["scores"][name]["answer"] == score.answer


def test_steps_map_and_explicit_names(tmp_path):
    a, b = _log_of("tiny-a", 40), _log_of("tiny-b", 40)
    rows = ingest_inspect(
        [a, b],
        out=tmp_path / "r",
        scorer="match",
        trajectory="mine",
        configuration="cfg",
        task="gsm8k",
        split="test",
        steps={a.name: 4, str(b): 8},
        **QUIET,
    ).generations
    assert set(rows["step"]) == {4, 8} and set(rows["trajectory"]) == {"mine"}
    assert set(rows["configuration"]) == {"cfg"} and set(rows["task"]) == {"gsm8k"}
    assert set(rows["subtask"]) == {"tiny_gsm"}  # the harness task under another ckptsel task
    assert set(rows["split"]) == {"validation", "test"}  # the samples' own split wins


def test_one_checkpoint_twice_is_an_error_naming_both_logs(tmp_path):
    with pytest.raises(CkptselError, match="given twice") as err:
        ingest_inspect([_log_of("tiny-b", 80), JSON_LOG], out=tmp_path / "r", scorer="match", **QUIET)
    assert JSON_LOG.name in str(err.value)


def _broken(tmp_path: Path, how: str) -> Path:
    src = _log_of("tiny-a", 80)
    if how == "truncated":
        p = tmp_path / "cut.eval"
        p.write_bytes(src.read_bytes()[:5000])
    elif how == "not_zip":
        p = tmp_path / "text.eval"
        p.write_text("hello")
    elif how == "no_header":
        p = tmp_path / "running.eval"
        with zipfile.ZipFile(p, "w") as zout:  # what an interrupted run leaves: a journal only
            zout.writestr("_journal/start.json", "{}")
    else:
        log = json.loads(JSON_LOG.read_text())
        if how == "status":
            log["status"] = "error"
        elif how == "partial":
            log["samples"][0]["scores"]["match"]["value"] = 0.5
        elif how == "epochs":
            log["samples"][0]["epoch"] = 2
        elif how == "no_step":
            log["eval"]["model"] = "hf/some-model"
        p = tmp_path / f"{how}.json"
        p.write_text(json.dumps(log))
    return p


@pytest.mark.parametrize(
    ("how", "needle"),
    [
        ("truncated", "not a readable .eval log"),
        ("not_zip", "not a readable .eval log"),
        ("no_header", "no header.json"),
        ("status", "status is 'error'"),
        ("partial", "not a correctness"),
        ("epochs", "epochs"),
        ("no_step", "--steps"),
    ],
)
def test_bad_inspect_logs_fail_naming_the_file_and_write_nothing(tmp_path, how, needle):
    out = tmp_path / "records"
    _keep(out)
    before = _records_bytes(out)
    bad = _broken(tmp_path, how)
    with pytest.raises(CkptselError, match=needle) as err:
        ingest_inspect([_log_of("tiny-b", 0), bad], out=out, scorer="match", **QUIET)
    assert str(bad) in str(err.value)
    assert _records_bytes(out) == before


def test_several_scorers_need_a_choice(tmp_path):
    with pytest.raises(CkptselError, match=r"several scorers \['last_number', 'match'\]; choose one with --scorer"):
        ingest_inspect([_log_of("tiny-a", 0)], out=tmp_path / "r", **QUIET)


# --------------------------------------------------------------------------- lighteval
@pytest.fixture(scope="module")
def lighteval_records(tmp_path_factory):
    out = tmp_path_factory.mktemp("lighteval") / "records"
    notes: list[str] = []
    return out, ingest_lighteval([DETAILS], out=out, note=notes.append), notes


def test_lighteval_details_become_records(lighteval_records):
    out, ingested, notes = lighteval_records
    gen = read_frame(out, "generations")
    assert len(gen) == 2 * 3 * ITEMS and notes == []
    assert set(gen["trajectory"]) == {"tiny-a", "tiny-b"} and set(gen["step"]) == {0, 40, 80}
    # one lighteval task per split (tiny_gsm_validation, tiny_gsm_test) is one task
    assert set(gen["task"]) == {"tiny_gsm"} and set(gen["subtask"]) == {""}
    ids = {f"q{i:02d}" for i in range(1, 12)} | {"q01b"}
    assert set(gen["item_id"]) == ids  # the real ids from doc.specific, not lighteval's row numbers
    g = gen.set_index(["trajectory", "step", "item_id"])
    assert g.loc[("tiny-b", 80, "q01"), "group"] == "g01" and g.loc[("tiny-b", 80, "q09"), "split"] == "test"
    for f in sorted(DETAILS.rglob("*.parquet")):
        traj, step = f.parts[-4], int(f.parts[-3].split("-")[1])
        raw = pd.read_parquet(f)
        for doc, metric in zip(raw["doc"], raw["metric"], strict=True):
            if metric["extractive_match"] is None:
                continue  # the LOGPROBS row of the same document
            row = g.loc[(traj, step, doc["specific"]["item_id"])]
            assert bool(row["correct"]) == (metric["extractive_match"] == 1.0)
            preds = doc["specific"]["extracted_predictions"]
            assert row["answer"] == (str(preds[0]) if len(preds) else "")
    assert gen["correct"].any()


def test_lighteval_says_why_its_logprobs_are_not_nll_and_analyze_runs(lighteval_records, tmp_path):
    out, ingested, _ = lighteval_records
    [line] = ingested.unavailable
    assert "no matched NLL" in line and "EOS" in line and "whitespace" in line
    assert ingested.nll is None and not (out / "nll.parquet").exists()
    summary = _analyze(out, tmp_path / "results")
    assert set(summary["budget"]) == {"accuracy", "agreement", "last"}
    assert summary["population"]["configurations"] == 2


def test_lighteval_files_steps_and_newest_timestamp(tmp_path):
    [val] = sorted((DETAILS / "runs" / "tiny-a" / "checkpoint-40").rglob("*validation*.parquet"))
    ts = val.parent.name
    newer = tmp_path / "details" / "m" / "2099-01-01T00-00-00.000000"
    newer.mkdir(parents=True)
    shutil.copy(val, newer / val.name.replace(ts, "2099-01-01T00-00-00.000000"))
    older = tmp_path / "details" / "m" / ts
    older.mkdir()
    shutil.copy(val, older / val.name)
    notes: list[str] = []
    rows = ingest_lighteval([tmp_path / "details"], out=tmp_path / "r", trajectory="t", steps={"m": 5}, note=notes.append).generations
    assert set(rows["step"]) == {5} and len(rows) == 8 and set(rows["split"]) == {"validation"}
    assert len(notes) == 1 and "2099-01-01" in notes[0]
    with pytest.raises(CkptselError, match="--steps") as err:
        ingest_lighteval([older / val.name], out=tmp_path / "r2", trajectory="t", **QUIET)
    assert val.name in str(err.value)
    with pytest.raises(CkptselError, match="per-sample metric 'acc' not found"):
        ingest_lighteval([val], out=tmp_path / "r3", metric="acc", **QUIET)


def test_bad_details_fail_naming_the_file(tmp_path):
    out = tmp_path / "records"
    _keep(out)
    before = _records_bytes(out)
    [good] = sorted((DETAILS / "runs" / "tiny-a" / "checkpoint-0").rglob("*test*.parquet"))
    bad_dir = tmp_path / "details" / "runs" / "t" / "checkpoint-9" / good.parent.name
    bad_dir.mkdir(parents=True)
    bad = bad_dir / good.name
    bad.write_bytes(good.read_bytes()[:3000])
    with pytest.raises(CkptselError, match="not a readable parquet file") as err:
        ingest_lighteval([DETAILS, tmp_path / "details"], out=out, **QUIET)
    assert str(bad) in str(err.value)
    with pytest.raises(CkptselError, match="--save-details"):
        ingest_lighteval([tmp_path / "records"], out=out, **QUIET)
    assert _records_bytes(out) == before


# --------------------------------------------------------------------------- the shared mapping
def test_mapping_writes_nll_rows_and_rejects_a_key_given_twice(tmp_path):
    rows = pd.DataFrame(
        {
            "item_id": ["a", "b"],
            "answer": ["1", None],
            "correct": [True, False],
            "text": ["1", "The answer is 2"],
            "harness_task": ["gsm8k", "gsm8k"],
        }
    )
    nll = pd.DataFrame(
        {"item_id": ["a", "b"], "split": ["validation"] * 2, "nll_sum": [1.5, 2.0], "n_tokens": [3, 4], "window": [512, 512]}
    )
    notes: list[str] = []
    got = ingest_logs(
        [CheckpointLog("log-1", 5, rows, trajectory="t", nll=nll)],
        out=tmp_path / "r",
        harness="test",
        split="validation",
        note=notes.append,
    )
    assert got.unavailable == () and len(read_frame(tmp_path / "r", "nll")) == 2
    assert got.generations.set_index("item_id").loc["b", "answer"] == "2"  # ckptsel's gsm8k rule
    assert len(notes) == 1 and "no extracted answer" in notes[0]
    with pytest.raises(CkptselError, match="log-1 and log-2: a generation for item 'a'"):
        ingest_logs(
            [CheckpointLog("log-1", 5, rows, trajectory="t"), CheckpointLog("log-2", 5, rows, trajectory="t")],
            out=tmp_path / "r",
            harness="test",
            **QUIET,
        )
    with pytest.raises(CkptselError, match="pass --trajectory"):
        ingest_logs([CheckpointLog("log-3", 5, rows)], out=tmp_path / "r", harness="test", **QUIET)
