"""Study files at URLs (issue 21), against a real S3 API (moto's server on 127.0.0.1):
``ckptsel run s3://…/study.toml --workdir DIR`` reads the file, its pool files and its run
folders (relative references below the file's folder URL) and writes the same summary.json
bytes as the same study run from a local folder; a study (local here) whose records and
results folders are URLs writes them there; ``protocol freeze|check`` on a URL hash the data
files as read through the store; a missing --workdir, a missing file and a URL runs_dir for a
study that trains are one error line each, exit 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ckptsel._util.locations import Location
from ckptsel.cli.app import main
from ckptsel.study.protocol import protocol_content
from ckptsel.study.spec import load_spec, load_study

pytest.importorskip("torch")
pytest.importorskip("peft")

from storagecase import tiny_case  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

STUDY = """schema = 2
[study]
name = "url-study"
base_model = "models/base"
seeds = [1]
{extra}
[validation]
task = "gsm8k"
file = "{validation}"
[test]
task = "gsm8k"
file = "{test}"
[measure]
max_new_tokens = 8
batch_size = 2
device = "cpu"
backend = "hf"
[analysis]
permutations = 10
draws = 100
budgets = [4]
[[configurations]]
name = "a"
runs = "{runs}/a-s*"
[[configurations]]
name = "b"
runs = "{runs}/b-s*"
"""


def cli(args: list, capsys) -> tuple[int, str]:
    capsys.readouterr()
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    got = capsys.readouterr()
    return code, got.out + got.err


def study_text(validation: str = "data/validation.jsonl", test: str = "data/test.jsonl", runs: str = "runs", extra: str = "") -> str:
    return STUDY.format(validation=validation, test=test, runs=runs, extra=extra)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """A study folder: the file, its item files, two run folders (configurations a and b,
    seed 1) and the base model; nothing else (no work done in it)."""
    from tinyrun import save_lora_checkpoints

    case = tiny_case(tmp_path_factory)
    root = tmp_path_factory.mktemp("url-study") / "study"
    shutil.copytree(case.run.run_dir, root / "runs" / "a-s1")
    save_lora_checkpoints(case.run.base, root / "runs" / "b-s1", [10, 20], seed=7)
    shutil.copytree(case.run.base, root / "models" / "base")
    (root / "data").mkdir()
    shutil.copy(case.run.validation, root / "data" / "validation.jsonl")
    shutil.copy(case.run.test, root / "data" / "test.jsonl")
    (root / "study.toml").write_text(study_text(), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def reference(folder: Path, tmp_path_factory) -> bytes:
    """summary.json of the study run from its local folder."""
    work = tmp_path_factory.mktemp("local-work")
    try:
        main(["run", str(folder / "study.toml"), "--workdir", str(work)])
    except SystemExit as exit_:
        assert not exit_.code
    return (work / "results" / "summary.json").read_bytes()


def test_study_file_at_a_url_gives_the_local_summary(folder, reference, s3, tmp_path, capsys):
    url = s3.upload(folder, "studies", "one") + "/study.toml"
    spec = load_spec(url, workdir=tmp_path / "w")
    assert spec.source == Location(url) and spec.workdir == (tmp_path / "w").resolve()
    assert spec.validation.files == (Location(s3.url("studies", "one", "data", "validation.jsonl")),)
    assert spec.study.base_model == s3.url("studies", "one", "models", "base")
    assert spec.external[0].pattern == s3.url("studies", "one", "runs", "a-s*")
    assert spec.study.records_root == (tmp_path / "w" / "records").resolve()

    code, said = cli(["run", url, "--workdir", tmp_path / "w"], capsys)
    assert code == 0, said
    assert "study.toml: not pre-registered" in said
    assert (tmp_path / "w" / "results" / "summary.json").read_bytes() == reference
    assert "measure: a-s1: 3 checkpoints, 3 measured" in said
    # nothing written next to the study file: its work is in the workdir
    assert not [k for k in s3.keys("studies", "one") if k.startswith((".ckptsel", "records"))]
    # a re-run measures nothing and writes the same summary
    code, said = cli(["run", url, "--workdir", tmp_path / "w"], capsys)
    assert code == 0 and "3 measured" not in said, said
    assert (tmp_path / "w" / "results" / "summary.json").read_bytes() == reference


def test_records_and_results_at_urls(folder, reference, s3, tmp_path, capsys):
    """A local study file naming URLs: item files, run folders, records and results."""
    for part in ("data", "runs"):
        s3.upload(folder / part, "shared", part)
    records, results = s3.url("out", "records"), s3.url("out", "results")
    extra = f'records_dir = "{records}"\nresults_dir = "{results}"'
    text = study_text(s3.url("shared", "data", "validation.jsonl"), s3.url("shared", "data", "test.jsonl"), s3.url("shared", "runs"), extra)
    local = tmp_path / "local"
    shutil.copytree(folder / "models", local / "models")
    (local / "study.toml").write_text(text, encoding="utf-8")
    spec = load_spec(local / "study.toml")
    assert spec.study.records_root == Location(records) and spec.results_dir == Location(results)
    code, said = cli(["run", local / "study.toml"], capsys)
    assert code == 0, said
    assert s3.fs.cat_file(f"{s3.bucket}/out/results/summary.json") == reference
    assert any(k.startswith("units/generations/a-s1/") for k in s3.keys("out", "records"))
    assert "manifest.json" in s3.keys("out", "results")
    assert sorted(p.name for p in local.iterdir()) == [".ckptsel", "models", "study.toml"]


def test_protocol_freeze_and_check_at_a_url(folder, s3, tmp_path, capsys):
    url = s3.upload(folder / "study.toml", "p", "study.toml")
    s3.upload(folder / "data", "p", "data")
    code, said = cli(["protocol", "freeze", url], capsys)
    assert code == 2 and "--workdir" in said and len(said.strip().splitlines()) == 1, said
    code, said = cli(["protocol", "freeze", url, "--workdir", tmp_path / "w"], capsys)
    assert code == 0, said
    assert f"{url}.protocol.json: protocol frozen at" in said
    frozen = json.loads(s3.fs.cat_file(f"{s3.bucket}/p/study.toml.protocol.json"))
    # the data files hashed through the store: the same digests as the local folder's
    assert "base_model" in frozen["protocol"]  # schema 2: the base model's identity too
    rest = {k: v for k, v in frozen["protocol"].items() if k != "base_model"}
    assert rest == protocol_content(folder / "study.toml")
    assert set(frozen["protocol"]["data_files"]) == {"validation.file", "test.file"}
    code, said = cli(["protocol", "check", url], capsys)
    assert code == 0 and "protocol frozen at" in said, said
    code, said = cli(["protocol", "freeze", url, "--workdir", tmp_path / "w"], capsys)
    assert code == 2 and "a protocol is frozen once" in said, said
    # a data file changed at the URL after freezing: check and run refuse, naming it
    s3.fs.pipe_file(f"{s3.bucket}/p/data/test.jsonl", b'{"question": "q", "answer": "#### 1"}\n')
    code, said = cli(["protocol", "check", url], capsys)
    assert code == 2 and "data_files.test.file" in said, said
    code, said = cli(["run", url, "--workdir", tmp_path / "w", "--dry-run"], capsys)
    assert code == 2 and "data_files.test.file" in said, said


def test_url_study_errors_are_one_line(folder, s3, tmp_path, capsys):
    url = s3.upload(folder / "study.toml", "e", "study.toml")
    code, said = cli(["run", url], capsys)
    assert code == 2 and len(said.strip().splitlines()) == 1, said
    assert f"{url}: a study file at a URL has no local folder" in said and "--workdir" in said
    missing = s3.url("e", "nothing.toml")
    for args in (["run", missing, "--workdir", tmp_path], ["protocol", "check", missing], ["train", missing, "--workdir", tmp_path]):
        code, said = cli(args, capsys)
        assert code == 2 and said.strip() == f"error: study file not found: {missing}", said
    code, said = cli(["run", url, "--workdir", s3.url("work")], capsys)
    assert code == 2 and "--workdir" in said and "local folder" in said, said
    # a study that trains writes runs locally: a runs_dir URL is refused, naming the key
    s3.upload(folder / "data", "e", "data")
    trains = study_text(extra=f'runs_dir = "{s3.url("runs")}"').split("[[configurations]]")[0]
    trains += '[train]\ntask = "gsm8k"\nfile = "data/validation.jsonl"\n'
    trains += '[[configurations]]\nname = "t"\nsteps = 1\n'
    s3.fs.pipe_file(f"{s3.bucket}/e/trains.toml", trains.encode())
    code, said = cli(["run", s3.url("e", "trains.toml"), "--workdir", tmp_path], capsys)
    assert code == 2 and len(said.strip().splitlines()) == 1, said
    assert "[study] runs_dir: must be a local folder" in said
    # without it: what ckptsel train reads (the train file a URL, the runs in the workdir)
    s3.fs.pipe_file(f"{s3.bucket}/e/trains.toml", trains.replace("runs_dir", "#").encode())
    study = load_study(s3.url("e", "trains.toml"), workdir=tmp_path)
    assert study.train == Location(s3.url("e", "data", "validation.jsonl"))
    assert study.run_root == tmp_path.resolve() / "runs" and study.root == tmp_path.resolve()


def test_train_a_study_file_at_a_url(folder, s3, tmp_path, capsys):
    """``ckptsel train s3://…/study.toml --workdir DIR``: the base model and the training file
    at the URL are read from this node's copy; the runs go to the workdir."""
    from ckptsel.train.checkpoints import checkpoint_steps

    s3.upload(folder / "models", "t", "models")
    s3.upload(folder / "data" / "validation.jsonl", "t", "train.jsonl")
    text = (
        'schema = 2\n[study]\nbase_model = "models/base"\nseeds = [1]\n'
        '[train]\ntask = "gsm8k"\nfile = "train.jsonl"\n'
        '[[configurations]]\nname = "l"\nrank = 2\nsteps = 2\nsave_every = 1\n'
        "batch_size = 2\nmicro_batch = 2\nmax_length = 64\n"
    )  # only what ckptsel train reads: [study], [train], [[configurations]]
    s3.fs.pipe_file(f"{s3.bucket}/t/study.toml", text.encode())
    url = s3.url("t", "study.toml")
    code, said = cli(["train", url, "--workdir", tmp_path / "w"], capsys)
    assert code == 0, said
    assert checkpoint_steps(tmp_path / "w" / "runs" / "l-s1") == [1, 2]
    assert json.loads((tmp_path / "w" / "final_steps.json").read_text()) == {"l-s1": 2}
    assert s3.keys("t") == ["models/base/" + k for k in s3.keys("t", "models", "base")] + ["study.toml", "train.jsonl"]
    code, said = cli(["train", url, "--workdir", tmp_path / "w", "--check"], capsys)
    assert code == 0 and "valid" in said, said


def test_pool_file_at_a_url_is_split_in_the_workdir(folder, s3, tmp_path, capsys):
    """``[pool]`` at the URL: split (lineage naming the URL), pools and audit in the workdir,
    the same split as from the local file."""
    rows = [
        {
            "query": f"What is {a} + {a}?",
            "response": f"{a} + {a} = {2 * a}. The answer is: {2 * a}",
            "type": "GSM_AnsAug",
            "original_question": f"q{a // 2}",
        }
        for a in range(40)
    ]
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "pool.json").write_text(json.dumps(rows), encoding="utf-8")
    shutil.copy(folder / "data" / "test.jsonl", tmp_path / "p" / "test.jsonl")
    (tmp_path / "p" / "study.toml").write_text(
        'schema = 2\n[study]\nbase_model = "hub/model"\nseeds = [1]\n'
        '[pool]\ntask = "metamath"\nfile = "pool.json"\nval_fraction = 0.25\n'
        '[validation]\nn = 4\n[test]\ntask = "gsm8k"\nfile = "test.jsonl"\n'
        '[[configurations]]\nname = "l"\nsteps = 2\nsave_every = 1\n',
        encoding="utf-8",
    )
    url = s3.upload(tmp_path / "p", "pool") + "/study.toml"
    for where, work in ((url, tmp_path / "w-url"), (tmp_path / "p" / "study.toml", tmp_path / "w")):
        code, said = cli(["run", where, "--workdir", work, "--until", "prepare"], capsys)
        assert code == 0 and "prepare: validation 4 items (metamath)" in said, said
    split = Path(".ckptsel") / "split"
    for name in ("train.json", "validation.json"):
        assert (tmp_path / "w-url" / split / name).read_bytes() == (tmp_path / "w" / split / name).read_bytes()
    lineage = json.loads((tmp_path / "w-url" / split / "lineage.json").read_text())
    assert lineage["source"] == s3.url("pool", "pool.json")
    assert (tmp_path / "w-url" / ".ckptsel" / "audit" / "audit.json").is_file()
    spec = load_spec(url, workdir=tmp_path / "w-url")
    assert spec.study.train == (tmp_path / "w-url" / split / "train.json").resolve()
