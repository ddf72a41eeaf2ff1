"""The study file read by one path: a schema-1 file is converted to the schema-2 structure on
load and checked by the same steps, so its errors name its own key and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ckptsel.errors import CkptselError
from ckptsel.study import load_spec, load_study

V1 = """[study]
base_model = "base"
task = "gsm8k"
train = "train.jsonl"
validation = "val.jsonl"
test = "test.jsonl"
seeds = [3]
[[configurations]]
name = "old"
steps = 4
"""


@pytest.fixture
def study_dir(tmp_path: Path) -> Path:
    for name in ("train", "val", "test"):
        rows = [{"question": f"q{a}?", "answer": f"x\n#### {a}"} for a in range(4)]
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


def _write(study_dir: Path, text: str) -> Path:
    path = study_dir / "study.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_schema1_file_reads_as_its_schema2_form(study_dir: Path) -> None:
    spec = load_spec(_write(study_dir, V1.replace("seeds", 'test_task = "gsm8k"\nseeds')))
    assert spec.study.train == study_dir / "train.jsonl" and spec.study.task == "gsm8k"
    assert spec.validation.files == (study_dir / "val.jsonl",)
    assert spec.validation.where == "[study] validation" and spec.test.where == "[study] test"
    assert spec.study.run_root == study_dir / "runs" and spec.results_dir == study_dir / "results"
    assert spec.trajectory_names() == ["old-s3"]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("seeds", "bogus = 1\nseeds"), r"line 7: \[study\] bogus: unknown key"),
        (('task = "gsm8k"', 'task = "gsm9k"'), r"line 3: \[study\] task: unknown task 'gsm9k'"),
        (("val.jsonl", "nope.jsonl"), r"line 5: \[study\] validation: file not found"),
        (("train.jsonl", "gone.jsonl"), r"line 4: \[study\] train: file not found"),
        (("steps = 4", "steps = 4.5"), r"line 10: configurations\[0\] steps: must be int"),
        (("[[configurations]]", "[pool]\nx = 1\n[[configurations]]"), r"pool: unknown table"),
    ],
)
def test_schema1_errors_name_the_files_own_key_and_line(study_dir, edit, message) -> None:
    text = V1.replace(*edit, 1)
    assert text != V1
    with pytest.raises(CkptselError, match=message):
        load_spec(_write(study_dir, text))


def test_train_reads_a_schema1_file_without_validation_or_test(study_dir: Path) -> None:
    text = V1.replace('validation = "val.jsonl"\ntest = "test.jsonl"\n', "")
    path = _write(study_dir, text)
    study = load_study(path)
    assert study.validation is None and study.test is None and study.configurations[0].steps == 4
    with pytest.raises(CkptselError, match="`ckptsel run` needs 'validation' and 'test' files"):
        load_spec(path)


def test_batch_size_is_an_int_or_auto(study_dir: Path) -> None:
    for value in ('"auto"', "8"):
        load_spec(_write(study_dir, V1 + f"[measure]\nbatch_size = {value}\n"))
    with pytest.raises(
        CkptselError, match=r'line 12: \[measure\] batch_size: must be an int or "auto"'
    ):
        load_spec(_write(study_dir, V1 + '[measure]\nbatch_size = "lots"\n'))
