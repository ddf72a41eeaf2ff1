"""The study file read by one path (``schema = 2``): its errors name its own key and line; a
schema-1 file (``[study]`` task/train/validation/test) is refused in one line that says how to
write it, and the schema-2 form that line describes reads as the schema-1 file did."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ckptsel.errors import CkptselError
from ckptsel.study.spec import SCHEMA1_HOWTO, load_spec, load_study

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
# V1 written as SCHEMA1_HOWTO says
V2 = """schema = 2
[study]
base_model = "base"
seeds = [3]
[train]
task = "gsm8k"
file = "train.jsonl"
[validation]
task = "gsm8k"
file = "val.jsonl"
[test]
task = "gsm8k"
file = "test.jsonl"
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


@pytest.mark.parametrize("text", [V1, "schema = 1\n" + V1, V1.replace("seeds", 'test_task = "gsm8k"\nseeds')])
def test_a_schema1_file_is_refused_in_one_line_that_says_how_to_write_schema2(study_dir, text):
    path = _write(study_dir, text)
    for load in (load_spec, load_study):
        with pytest.raises(CkptselError) as err:
            load(path)
        said = str(err.value)
        assert "\n" not in said and said.startswith(str(path))
        assert "schema-1 study file" in said and SCHEMA1_HOWTO in said
        assert "schema = 2" in said and "[train] task/file" in said


def test_the_schema2_form_reads_as_the_schema1_file_did(study_dir: Path) -> None:
    spec = load_spec(_write(study_dir, V2))
    assert spec.study.train == study_dir / "train.jsonl" and spec.study.task == "gsm8k"
    assert spec.validation.files == (study_dir / "val.jsonl",) and spec.test.task == "gsm8k"
    assert spec.validation.where == "[validation]" and spec.test.where == "[test]"
    assert spec.study.run_root == study_dir / "runs" and spec.results_dir == study_dir / "results"
    assert spec.trajectory_names() == ["old-s3"]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("seeds", "bogus = 1\nseeds"), r"line 4: \[study\] bogus: unknown key"),
        (('task = "gsm8k"', 'task = "gsm9k"'), r"line 6: \[train\] task: unknown task 'gsm9k'"),
        (("val.jsonl", "nope.jsonl"), r"line 10: \[validation\] file: file not found"),
        (("train.jsonl", "gone.jsonl"), r"line 7: \[train\] file: file not found"),
        (("steps = 4", "steps = 4.5"), r"line 16: configurations\[0\] steps: must be int"),
        (("[[configurations]]", "[pol]\nx = 1\n[[configurations]]"), r"pol: unknown table"),
    ],
)
def test_errors_name_the_files_own_key_and_line(study_dir, edit, message) -> None:
    text = V2.replace(*edit, 1)
    assert text != V2
    with pytest.raises(CkptselError, match=message):
        load_spec(_write(study_dir, text))


def test_train_reads_a_file_with_only_train(study_dir: Path) -> None:
    text = V2.split("[validation]")[0] + "[[configurations]]" + V2.split("[[configurations]]")[1]
    assert "[test]" not in text and "[validation]" not in text
    path = _write(study_dir, text)
    study = load_study(path)
    assert study.validation is None and study.test is None and study.configurations[0].steps == 4
    assert study.train == study_dir / "train.jsonl" and study.task == "gsm8k"
    with pytest.raises(CkptselError, match=r"\[validation\]: missing table"):
        load_spec(path)


def test_batch_size_is_an_int_or_auto(study_dir: Path) -> None:
    for value in ('"auto"', "8"):
        load_spec(_write(study_dir, V2 + f"[measure]\nbatch_size = {value}\n"))
    with pytest.raises(CkptselError, match=r'line 18: \[measure\] batch_size: must be an int or "auto"'):
        load_spec(_write(study_dir, V2 + '[measure]\nbatch_size = "lots"\n'))


def test_train_reads_a_file_with_only_pool(study_dir: Path) -> None:
    text = V2.replace("[train]", "[pool]").split("[validation]")[0]
    text += "[[configurations]]" + V2.split("[[configurations]]")[1]
    path = _write(study_dir, text)
    study = load_study(path)
    assert study.test is None and study.task == "gsm8k" and study.configurations[0].name == "old"
    with pytest.raises(CkptselError, match=r"\[test\]: missing table"):
        load_spec(path)
