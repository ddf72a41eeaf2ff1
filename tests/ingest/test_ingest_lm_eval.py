"""``ckptsel ingest lm-eval`` on hand-made samples files in lm-evaluation-harness's format
(``--log_samples``: one JSON object per document and filter)."""

from __future__ import annotations

import pandas as pd
import pytest

from ckptsel.errors import CkptselError
from ckptsel.ingest.lm_eval import ingest_lm_eval
from ckptsel.records.scan import read_frame
from ckptsel.records.schema import GENERATION_COLUMNS
from ckptsel.records.store import upsert_records
from lmevalcase import gsm8k_checkpoint, gsm8k_line, text_hash, write_samples  # noqa: E402


@pytest.fixture()
def evals(tmp_path):
    root = tmp_path / "evals" / "run-x"
    c100 = gsm8k_checkpoint(root / "checkpoint-100", ["3 + 15 = 18\n#### 18", "It is $1,234.", "7 - 2 = 4\n#### 4"], [True, True, False])
    c200 = gsm8k_checkpoint(root / "checkpoint-200", ["#### 18", "1200 + 34 = 1234\n#### 1,234", "maybe"], [True, True, False])
    return tmp_path, [c100, c200]


def test_gsm8k_two_checkpoints_strict_match(evals):
    tmp, folders = evals
    out = tmp / "records"
    rows = ingest_lm_eval(folders, out=out, task="gsm8k", filter_name="strict-match", note=lambda m: None)
    gen = read_frame(out, "generations")
    assert list(gen.columns) == [*GENERATION_COLUMNS, "text"]
    assert len(gen) == len(rows) == 6
    assert set(gen["trajectory"]) == {"run-x"} and set(gen["configuration"]) == {"run-x"}
    assert set(gen["split"]) == {"test"} and set(gen["task"]) == {"gsm8k"} and set(gen["subtask"]) == {""}
    g = gen.set_index(["step", "item_id"])
    assert g.loc[(100, "gsm8k-0"), "answer"] == "18" and bool(g.loc[(100, "gsm8k-0"), "correct"])
    assert g.loc[(100, "gsm8k-1"), "answer"] == "" and not g.loc[(100, "gsm8k-1"), "correct"]  # "[invalid]"
    assert g.loc[(100, "gsm8k-2"), "answer"] == "4" and not g.loc[(100, "gsm8k-2"), "correct"]
    assert g.loc[(200, "gsm8k-1"), "answer"] == "1234" and bool(g.loc[(200, "gsm8k-1"), "correct"])
    assert g.loc[(200, "gsm8k-1"), "text"] == "1200 + 34 = 1234\n#### 1,234"  # raw generation kept
    assert (gen["group"] == gen["item_id"]).all()


def test_flexible_filter_and_cli(evals, capsys):
    from ckptsel.cli.app import main

    tmp, folders = evals
    out = tmp / "records"
    with pytest.raises(SystemExit) as e:
        main(
            [
                "ingest",
                "lm-eval",
                *map(str, folders),
                "--out",
                str(out),
                "--task",
                "gsm8k",
                "--filter",
                "flexible-extract",
                "--trajectory",
                "t1",
                "--configuration",
                "c1",
                "--split",
                "validation",
            ]
        )
    assert e.value.code in (0, None)
    assert "ingested 6 generation rows" in capsys.readouterr().out
    gen = read_frame(out, "generations").set_index(["step", "item_id"])
    assert gen.loc[(100, "gsm8k-1"), "answer"] == "1234" and bool(gen.loc[(100, "gsm8k-1"), "correct"])
    assert set(gen["trajectory"]) == {"t1"} and set(gen["configuration"]) == {"c1"}
    assert set(gen["split"]) == {"validation"}


def test_several_filters_need_a_choice_and_nothing_is_written(evals, capsys):
    from ckptsel.cli.app import main

    tmp, folders = evals
    out = tmp / "records"
    with pytest.raises(SystemExit) as e:
        main(["ingest", "lm-eval", *map(str, folders), "--out", str(out)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--filter" in err and "flexible-extract" in err and "strict-match" in err
    assert not (out / "generations.parquet").exists()
    assert not (out / "units").exists()


def test_multiple_choice_answer_is_argmax_and_subtask_is_lm_task(tmp_path):
    folder = tmp_path / "ev" / "run-m" / "checkpoint-5"
    lines = []
    for i, (scores, acc) in enumerate([((-0.9, -0.5), 1.0), ((-0.2, -1.5), 0.0), ((-1.0, -1.0), 0.0)]):
        lines.append(
            {
                "doc_id": i,
                "doc": {"question": f"q{i}?", "passage": "p", "label": 1},
                "target": 1,
                "arguments": {"gen_args_0": {"arg_0": f"q{i}?", "arg_1": " no"}, "gen_args_1": {"arg_0": f"q{i}?", "arg_1": " yes"}},
                "resps": [[[str(s), "False"]] for s in scores],
                "filtered_resps": [[str(s), "False"] for s in scores],  # lm-eval stringifies these
                "filter": "none",
                "metrics": ["acc"],
                "doc_hash": text_hash(f"q{i}"),
                "acc": acc,
            }
        )
    write_samples(folder, "boolq", lines, gz=True)
    rows = ingest_lm_eval([folder], out=tmp_path / "rec", task="commonsense", note=lambda m: None)
    r = rows.set_index("item_id")
    assert r.loc["boolq-0", "answer"] == "1" and bool(r.loc["boolq-0", "correct"])
    assert r.loc["boolq-1", "answer"] == "0" and not r.loc["boolq-1", "correct"]
    assert r.loc["boolq-2", "answer"] == "0"  # exact tie: the first choice
    assert set(rows["subtask"]) == {"boolq"} and set(rows["step"]) == {5}
    assert set(rows["trajectory"]) == {"run-m"} and set(rows["task"]) == {"commonsense"}


def test_ingest_appends_to_existing_records(evals):
    tmp, folders = evals
    out = tmp / "records"
    other = pd.DataFrame(
        {
            "trajectory": ["other"] * 2,
            "configuration": ["cfg"] * 2,
            "task": ["gsm8k"] * 2,
            "step": [1, 1],
            "split": ["test"] * 2,
            "item_id": ["gsm8k-0", "gsm8k-1"],
            "group": ["a", "b"],
            "subtask": ["", ""],
            "answer": ["1", ""],
            "correct": [True, False],
        }
    )
    upsert_records(out, generations=other)
    ingest_lm_eval(folders, out=out, task="gsm8k", filter_name="strict-match", note=lambda m: None)
    gen = read_frame(out, "generations")
    kept = gen[gen["trajectory"] == "other"].reset_index(drop=True)
    assert kept[list(GENERATION_COLUMNS)].astype(object).equals(other.astype(object))
    assert kept["text"].isna().all()
    # ingesting again is refused (keys already recorded), nothing written; --replace replaces
    # the same keys instead of duplicating them
    with pytest.raises(CkptselError, match=r"6 generation row\(s\) of these logs are already"):
        ingest_lm_eval(folders, out=out, task="gsm8k", filter_name="strict-match", note=lambda m: None)
    ingest_lm_eval(folders, out=out, task="gsm8k", filter_name="strict-match", note=lambda m: None, replace=True)
    assert len(read_frame(out, "generations")) == len(gen) == 8


def test_newest_samples_file_wins(tmp_path):
    folder = tmp_path / "run" / "checkpoint-1"
    write_samples(folder, "gsm8k", [gsm8k_line(0, "#### 3", "strict-match", "3", 0.0)], stamp="2024-01-01T00-00-00.000001")
    write_samples(folder, "gsm8k", [gsm8k_line(0, "#### 18", "strict-match", "18", 1.0)])
    notes: list[str] = []
    rows = ingest_lm_eval([folder], out=tmp_path / "rec", task="gsm8k", note=notes.append)
    assert rows["answer"].tolist() == ["18"] and rows["correct"].tolist() == [True]
    assert len(notes) == 1 and "2024-01-01" in notes[0]


@pytest.mark.parametrize(
    ("breakage", "needle"),
    [
        ("bad_json", ":2: not valid JSON"),
        ("dup_doc", "doc_id 0 repeated"),
        ("partial_metric", "not 0/1"),
        ("no_metric", "exact_match or acc missing"),
        ("no_filtered", "filtered_resps missing"),
        ("doc_hash", "different documents"),
        ("bad_name", "checkpoint-<step>"),
    ],
)
def test_bad_samples_are_rejected_and_records_kept(tmp_path, breakage, needle):
    out = tmp_path / "records"
    upsert_records(
        out,
        generations=pd.DataFrame(
            {
                "trajectory": ["keep"],
                "configuration": ["k"],
                "task": ["gsm8k"],
                "step": [1],
                "split": ["test"],
                "item_id": ["x"],
                "group": ["x"],
                "subtask": [""],
                "answer": [""],
                "correct": [False],
            }
        ),
    )
    before = _records_bytes(out)
    good = [gsm8k_line(0, "#### 18", "strict-match", "18", 1.0), gsm8k_line(1, "#### 1", "strict-match", "1", 0.0)]
    first = tmp_path / "ev" / "run" / "checkpoint-1"
    write_samples(first, "gsm8k", good)
    second = tmp_path / "ev" / "run" / ("checkpoint-2" if breakage != "bad_name" else "final")
    lines = [dict(x) for x in good]
    if breakage == "dup_doc":
        lines[1]["doc_id"] = 0
    elif breakage == "partial_metric":
        lines[1]["exact_match"] = 0.5
    elif breakage == "no_metric":
        del lines[1]["exact_match"]
    elif breakage == "no_filtered":
        del lines[1]["filtered_resps"]
    elif breakage == "doc_hash":
        lines[1] = gsm8k_line(1, "#### 1", "strict-match", "1", 0.0, question="another question")
    path = write_samples(second, "gsm8k", lines)
    if breakage == "bad_json":
        path.write_text(path.read_text().splitlines()[0] + "\n{oops\n")
    with pytest.raises(CkptselError, match=needle.replace("(", r"\(")):
        ingest_lm_eval([first, second], out=out, task="gsm8k", note=lambda m: None)
    assert _records_bytes(out) == before


def test_step_option_and_missing_samples(tmp_path):
    folder = tmp_path / "ev" / "somewhere"
    write_samples(folder, "gsm8k", [gsm8k_line(0, "#### 18", "strict-match", "18", 1.0)])
    rows = ingest_lm_eval([folder], out=tmp_path / "rec", step=42, trajectory="t", task="gsm8k")
    assert rows["step"].tolist() == [42]
    empty = tmp_path / "ev" / "checkpoint-3"
    empty.mkdir(parents=True)
    with pytest.raises(CkptselError, match="--log_samples"):
        ingest_lm_eval([empty], out=tmp_path / "rec")
    with pytest.raises(CkptselError, match="single SAMPLES_DIR"):
        ingest_lm_eval([folder, empty], out=tmp_path / "rec", step=1)


def _records_bytes(folder):
    """Every records file's bytes, single file and units (not the read or part caches)."""
    return {
        p.relative_to(folder): p.read_bytes()
        for p in sorted(folder.rglob("*.parquet"))
        if ".cache" not in p.parts and ".parts" not in p.parts
    }
