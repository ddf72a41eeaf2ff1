"""``run --dry-run`` checks what the real run checks and writes nothing; the quickstart checks its
options before it writes or trains anything (issue 30, item 9)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clirun import run_cli
from tinyrun import POOL_STUDY, build_tiny_base


def files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    pytest.importorskip("peft")
    texts = [f"Ann has {a} pens and gets {a + 1} more. #### {2 * a + 1}" for a in range(40)]
    return build_tiny_base(tmp_path_factory.mktemp("base") / "base", texts)


@pytest.fixture
def study(tmp_path: Path, base: Path) -> Path:
    rows = [
        {
            "query": f"Ann has {a} pens and gets {a + 1} more. How many?",
            "response": f"x The answer is: {2 * a + 1}",
            "original_question": f"q{a}",
        }
        for a in range(40)
    ]
    (tmp_path / "pool.json").write_text(json.dumps(rows))
    test = [{"question": f"Bo has {a} cups; {a} more?", "answer": f"#### {2 * a}"} for a in range(6)]
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in test))
    (tmp_path / "base").symlink_to(base, target_is_directory=True)
    path = tmp_path / "study.toml"
    path.write_text(POOL_STUDY)
    return path


def test_dry_run_writes_nothing(study: Path, capsys):
    before = files_under(study.parent)
    code, out = run_cli(["run", study, "--dry-run"], capsys)
    assert code == 0, out
    assert "a-s1" in out  # the plan names the trajectory
    assert files_under(study.parent) == before  # no split, no lineage, no state


BAD = [
    ("[analysis]\nbudgets = [0]\n", "[analysis]"),
    ("[analysis]\ndraws = 5\n", "[analysis]"),
    ('[analysis]\ninterval = "bayes"\n', "[analysis]"),
    ("[analysis]\nlevel = 2\n", "[analysis]"),
    ("", "name", {'name = "a"': 'name = ".."'}),
    ("", "name", {'name = "a"': 'name = "x\\ny"'}),
    ("", "name", {'name = "a"': f'name = "{"n" * 300}"'}),
    ("", "lr", {"save_every = 1": "save_every = 1\nlr = inf"}),
    ("", "seeds", {"seeds = [1]": "seeds = [-1]"}),
    ("", "nonexistent_proj", {"save_every = 1": 'save_every = 1\ntarget_modules = ["nonexistent_proj"]'}),
    ("", "max_length", {"save_every = 1": "save_every = 1\nmax_length = 1"}),
]


@pytest.mark.parametrize("case", BAD, ids=lambda c: (c[0] or str(c[2])).strip()[:40])
def test_dry_run_refuses_what_the_run_refuses(study: Path, capsys, case):
    extra, needle, *edits = case
    text = POOL_STUDY + extra
    for old, new in (edits[0] if edits else {}).items():
        text = text.replace(old, new)
    study.write_text(text)
    before = files_under(study.parent)
    code, out = run_cli(["run", study, "--dry-run"], capsys)
    assert code == 2, out
    assert "Traceback" not in out, out
    assert needle in " ".join(out.split()), out
    assert files_under(study.parent) == before


def test_training_that_keeps_no_response_token_is_refused(tmp_path, base):
    from ckptsel.errors import CkptselError
    from ckptsel.study.configuration import Configuration
    from ckptsel.train.models import load_tokenizer
    from ckptsel.train.trajectory import encode_example, train_trajectory

    tok = load_tokenizer(base)
    cfg = Configuration("a", steps=1, max_length=3, batch_size=1, micro_batch=1)
    ex = [encode_example(tok, "Ann has 3 pens and gets 4 more. How many?", "#### 7", 3)]
    with pytest.raises(CkptselError, match="max_length = 3"):
        train_trajectory(str(base), ex, cfg, 1, tmp_path / "a-s1", tokenizer=tok, progress=False)
    assert not (tmp_path / "a-s1").exists()


@pytest.mark.parametrize("args", [["--device", "tpu"], ["--workers", "-1"]])
def test_quickstart_checks_its_options_first(tmp_path, capsys, args):
    out = tmp_path / "qs"
    code, text = run_cli(["quickstart", "--fast", "--out", out, *args], capsys)
    assert code == 2, text
    assert "Traceback" not in text
    assert not out.exists() or not any(out.iterdir())


def test_the_study_file_can_turn_the_conformance_check_off(study: Path, capsys):
    from ckptsel.study.spec import load_spec
    from ckptsel.workflows.study_run.job import StudyRun

    study.write_text(POOL_STUDY + "[measure]\nconformance_check = false\n")
    job = StudyRun(load_spec(study), device="cpu", log=lambda m: None)
    assert job.measure_config().conformance_check is False
    study.write_text(POOL_STUDY + '[measure]\nconformance_check = "no"\n')
    code, out = run_cli(["run", study, "--dry-run"], capsys)
    assert code == 2 and "conformance_check: must be bool" in out, out


def test_a_ray_address_that_does_not_answer_fails_in_one_line(tmp_path, capsys):
    """Ray retried for two minutes and then started a local instance (issue 30, item 9)."""
    import time

    pytest.importorskip("ray")
    from tinyrun import build_tiny_run

    run = build_tiny_run(tmp_path / "run", steps=(10,), n_validation=4, n_test=2)
    out = tmp_path / "records"
    args = [
        "measure",
        run.run_dir,
        "--task",
        "gsm8k",
        "--validation",
        run.validation,
        "--test",
        run.test,
        "--out",
        out,
        "--executor",
        "ray",
        "--ray-address",
        "127.0.0.1:1",
        "--no-progress",
    ]
    t0 = time.perf_counter()
    code, text = run_cli(args, capsys)
    assert code == 2, text
    assert time.perf_counter() - t0 < 30
    assert "Traceback" not in text and "127.0.0.1:1 does not answer" in " ".join(text.split())
    assert not out.exists() or not any(out.rglob("*.parquet"))
