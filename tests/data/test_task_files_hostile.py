"""Hostile task files (issue 45): a task file is data, a scorer is code and says so, its regexes
run under a time bound, and every value is checked where it is read. Each case runs through the
command line as a user types it: exit 2, one line naming the file and the key, no traceback,
nothing written or deleted."""

from __future__ import annotations

import json
import os
import re
import textwrap
import time
from pathlib import Path

import pytest

from clirun import run_cli

BASE = """\
name = "hostile"
[fields]
prompt = "q"
response = "target"
reference = "gold"
[answer]
{answer}
[example]
q = "Say hello"
target = {target}
gold = {gold}
"""
SLOW = "a" * 66 + "b"  # '^(a|aa)+$' backtracks on it far longer than the time bound


def body(answer: str, target: str = "hello there", gold: str = "hello") -> str:
    return BASE.format(answer=answer, target=json.dumps(target), gold=json.dumps(gold))


def fields(table: str, answer: str = 'compare = "exact"') -> str:
    return f'name = "hostile"\n[fields]\n{table}\n[answer]\n{answer}\n'


def listing(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` and its content (what 'nothing written' compares)."""
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else b"" for p in sorted(root.rglob("*"))}


def refused(said: str, code: int, *needles: str) -> None:
    """Exit 2, one line of message naming each needle (the file, the key), no traceback."""
    assert code == 2, said
    assert "Traceback" not in said, said
    errors = [line for line in said.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and said.strip() == errors[0], said
    for needle in needles:
        assert needle in errors[0], (needle, said)


SCORERS = {
    "victim.py": "def keep(answer, reference):\n    return True\n",
    "exit_at_import.py": "import sys\nsys.exit(0)\n",
    "exit_at_call.py": "import sys\ndef fn(answer, reference):\n    sys.exit(0)\n",
    "raise_at_import.py": "raise ValueError('bad\\nthing')\n",
    "bad_bool.py": (
        "class Liar:\n    def __bool__(self):\n        raise RuntimeError('no truth')\ndef fn(answer, reference):\n    return Liar()\n"
    ),
    "int_verdict.py": "def fn(answer, reference):\n    return 1\n",
    "not_callable.py": "fn = 3\n",
    "raises.py": "def fn(answer, reference):\n    raise KeyError('x\\ny')\n",
    "keyboard_free.py": "def fn(answer, reference):\n    raise GeneratorExit('stop')\n",
}

# (task file text, extra CLI args of 'tasks show', what the one line names)
CASES = {
    # a task file names no importable module: shutil:rmtree / os:rename are refused, unrun
    "rmtree": (body('scorer = "shutil:rmtree"', target="VICTIM", gold="VICTIM"), [], "[answer] scorer 'shutil:rmtree'"),
    "rename": (body('scorer = "os:rename"', target="VICTIM/keep.txt", gold="VICTIM/moved.txt"), [], "[answer] scorer 'os:rename'"),
    "absolute scorer": (body('scorer = "/tmp/score.py:fn"'), [], "relative path inside"),
    "dotdot scorer": (body('scorer = "../victim.py:keep"'), [], "relative path inside"),
    "dotdot inside": (body('scorer = "sub/../../victim.py:keep"'), [], "relative path inside"),
    "symlink out": (body('scorer = "link.py:keep"'), [], "leads outside the task file's folder"),
    "home scorer": (body('scorer = "~/score.py:fn"'), [], "relative path inside"),
    "scorer number": (body("scorer = 3"), [], "[answer] scorer: must be a string"),
    "scorer missing": (body('scorer = "nope.py:fn"'), [], "[answer] scorer 'nope.py:fn': no file"),
    "scorer folder": (body('scorer = "sub:fn"'), [], "write it as 'score.py:function'"),
    "scorer folder.py": (body('scorer = "dir.py:fn"'), [], "[answer] scorer 'dir.py:fn': no file"),
    "scorer not python": (body('scorer = "victim.txt:keep"'), [], "write it as 'score.py:function'"),
    # user code: SystemExit and anything else, at import and at call, is one line
    "exit at import": (body('scorer = "exit_at_import.py:fn"'), ["--score"], "importing exit_at_import.py raised SystemExit"),
    "exit at call": (body('scorer = "exit_at_call.py:fn"'), ["--score"], "scorer exit_at_call.py:fn: raised SystemExit"),
    "raise at import": (body('scorer = "raise_at_import.py:fn"'), ["--score"], "raised ValueError: bad thing"),
    "raise at call": (body('scorer = "raises.py:fn"'), ["--score"], "raised KeyError"),
    "GeneratorExit": (body('scorer = "keyboard_free.py:fn"'), ["--score"], "raised GeneratorExit"),
    "__bool__ raises": (body('scorer = "bad_bool.py:fn"'), ["--score"], "returned Liar, not a bool"),
    "int verdict": (body('scorer = "int_verdict.py:fn"'), ["--score"], "returned int, not a bool"),
    "not callable": (body('scorer = "not_callable.py:fn"'), ["--score"], "not_callable.py has no function 'fn'"),
    # wrong types
    "compare list": (body('compare = ["numeric"]'), [], "[answer] compare: must be a string"),
    "compare table": (body("compare = {rule = 'numeric'}"), [], "[answer] compare: must be a string"),
    "extract list": (body("extract = ['a']"), [], "[answer] extract: must be a string"),
    "select list": (body("extract = '(a)'\nselect = ['last']"), [], "[answer] select: must be a string"),
    "labels twice": (body('compare = "labels"\nlabels = ["yes", "Yes"]'), [], "[answer] labels: 'Yes' is listed twice"),
    # numbers: finite, >= 0
    "tolerance nan": (body('compare = "numeric"\ntolerance = nan', gold="1"), [], "[answer] tolerance: a finite number >= 0"),
    "tolerance inf": (body('compare = "numeric"\ntolerance = inf', gold="1"), [], "[answer] tolerance: a finite number >= 0"),
    # regexes: any compile failure, sizes, and a match past the time bound
    "huge repeat": (body("extract = 'a{99999999999}'"), [], "[answer] extract"),
    "deep nesting": (body("extract = '" + "(" * 450 + "a" + ")" * 450 + "'"), [], "[answer] extract"),
    "too long": (body("extract = '" + "x" * 5000 + "'"), [], "the regex has 5000 characters"),
    "repeat product": (body("extract = '(a{1000}){1000}'"), [], "counted repeats"),
    "backtracking extract": (body("extract = '^(a|aa)+$'", target=SLOW), [], "[answer] extract '^(a|aa)+$': no match decided within 1 s"),
    "backtracking reference": (
        fields('prompt = "q"\nreference = "gold"\nreference_regex = \'^(a|aa)+$\'') + f'[example]\nq = "x"\ngold = "{SLOW}"\n',
        [],
        "[fields] reference_regex '^(a|aa)+$': no match decided",
    ),
    "reference_regex bad": (fields('prompt = "q"\nreference = "gold"\nreference_regex = "(x"'), [], "[fields] reference_regex"),
    "reference_regex number": (fields('prompt = "q"\nreference = "gold"\nreference_regex = 5'), [], "[fields] reference_regex"),
    # fields that collide
    "prompt is reference": (fields('prompt = "gold"\nreference = "gold"'), [], "[fields] prompt: names 'gold', the reference field"),
    "prompt has response": (fields('prompt = ["q", "target"]\nreference = "gold"\nresponse = "target"'), [], "the response field"),
    "prompt lists reference": (
        fields('prompt = ["q", "gold"]\nreference = "gold"'),
        [],
        "[fields] prompt: names 'gold', the reference field",
    ),
    "reference_regex long": (
        fields('prompt = "q"\nreference = "gold"\nreference_regex = "' + "y" * 1001 + '"'),
        [],
        "the regex has 1001 characters",
    ),
    "reference_regex repeats": (
        fields('prompt = "q"\nreference = "gold"\nreference_regex = \'(a{500}){500}\''),
        [],
        "[fields] reference_regex: '(a{500}){500}': counted repeats",
    ),
    "prompt twice": (fields('prompt = ["q", "q"]\nreference = "gold"'), [], "[fields] prompt: field 'q' is listed twice"),
}


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    """A task folder with scorer files, a victim folder beside it and a link leading out."""
    root = tmp_path / "tasks"
    for name, text in SCORERS.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    (root / "sub").mkdir()
    (root / "dir.py").mkdir()
    (tmp_path / "victim.py").write_text(SCORERS["victim.py"], encoding="utf-8")
    os.symlink(tmp_path / "victim.py", root / "link.py")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("precious", encoding="utf-8")
    return root


@pytest.mark.parametrize("case", list(CASES))
def test_a_hostile_task_file_is_one_line(folder: Path, case: str, capsys) -> None:
    text, extra, needle = CASES[case]
    victim = folder.parent / "victim"
    task = folder / "hostile.toml"
    task.write_text(text.replace("VICTIM", str(victim)), encoding="utf-8")
    before = listing(folder.parent)
    started = time.monotonic()
    code, said = run_cli(["tasks", "show", task, *extra], capsys)
    assert time.monotonic() - started < 10, said
    refused(said, code, str(task), needle)
    assert listing(folder.parent) == before  # nothing written, moved or deleted
    assert (victim / "keep.txt").read_text() == "precious"


def test_a_task_file_that_is_a_fifo_is_refused_not_read(tmp_path, capsys) -> None:
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    started = time.monotonic()
    code, said = run_cli(["tasks", "show", fifo], capsys)
    assert time.monotonic() - started < 10, said
    refused(said, code, str(fifo), "not a regular file")


# --------------------------------------------------------------------------- a scorer is code

SCORER = """\
from pathlib import Path
LOG = Path(__file__).with_name("log.txt")
LOG.write_text(LOG.read_text() + "imported\\n" if LOG.exists() else "imported\\n")
def same(answer, reference):
    LOG.write_text(LOG.read_text() + f"called {answer}\\n")
    return answer == reference
"""


def test_tasks_show_names_the_code_and_runs_it_only_with_score(tmp_path, capsys) -> None:
    (tmp_path / "score.py").write_text(SCORER, encoding="utf-8")
    task = tmp_path / "t.toml"
    task.write_text(body("extract = '^(\\S+)'\nscorer = \"score.py:same\""), encoding="utf-8")
    log = tmp_path / "log.txt"
    code, said = run_cli(["tasks", "show", task], capsys)
    assert code == 0, said
    assert f"runs code: score.py:same ({tmp_path / 'score.py'})" in said
    assert "not judged: the scorer runs code (score.py:same), pass --score to run it" in said
    assert not log.exists()  # shown, never imported
    code, said = run_cli(["tasks", "show", task, "--score"], capsys)
    assert code == 0, said
    assert "answer 'hello', correct" in said
    assert log.read_text() == "imported\ncalled hello\n"
    plain = tmp_path / "plain.toml"
    plain.write_text(body("extract = '^(\\S+)'"), encoding="utf-8")
    code, said = run_cli(["tasks", "show", plain], capsys)
    assert code == 0 and "runs no code" in said and "answer 'hello', correct" in said, said


def _hash(said: str) -> str:
    found = re.search(r"content hash ([0-9a-f]{16})", said)
    assert found, said
    return found.group(1)


def test_the_scorer_file_is_part_of_the_task_identity(tmp_path, capsys) -> None:
    from ckptsel.measure.config import MeasureConfig

    (tmp_path / "score.py").write_text(SCORER, encoding="utf-8")
    task = tmp_path / "t.toml"
    task.write_text(body('scorer = "score.py:same"'), encoding="utf-8")
    code, said = run_cli(["tasks", "show", task], capsys)
    first = _hash(said)
    code, said = run_cli(["tasks", "show", task, "--score"], capsys)
    assert "answer 'hello there', wrong" in said  # '=='
    print_before = MeasureConfig(task=str(task)).generation_fingerprint()
    time.sleep(0.01)
    (tmp_path / "score.py").write_text(SCORER.replace("==", "!="), encoding="utf-8")
    code, said = run_cli(["tasks", "show", task], capsys)
    assert code == 0 and _hash(said) != first, said  # an edited scorer is an edited task
    assert MeasureConfig(task=str(task)).generation_fingerprint() != print_before
    code, said = run_cli(["tasks", "show", task, "--score"], capsys)
    assert "answer 'hello there', correct" in said  # the edited scorer judges ('!=')


def test_an_old_backtracking_regex_is_bounded(tmp_path, capsys) -> None:
    """The issue's '^(a+)+$' on a 41-character response: answered at once now."""
    task = tmp_path / "t.toml"
    task.write_text(body("extract = '^(a+)+$'", target="a" * 40 + "!"), encoding="utf-8")
    started = time.monotonic()
    code, said = run_cli(["tasks", "show", task], capsys)
    assert code == 0 and time.monotonic() - started < 10, said
    assert "answer '', wrong" in said


# --------------------------------------------------------------------------- ingest, compare-logs


def _slow_task(tmp_path: Path) -> Path:
    task = tmp_path / "slow.toml"
    task.write_text(fields('prompt = "question"\nreference = "answer"', "extract = '^(a|aa)+$'"), encoding="utf-8")
    return task


def test_ingest_and_compare_logs_end_a_backtracking_regex_in_one_line(tmp_path, capsys) -> None:
    from lmevalcase import gsm8k_checkpoint

    runs = [
        gsm8k_checkpoint(tmp_path / "evals" / name / "checkpoint-100", ["#### 18", f"so {SLOW}", "#### 4"], [True, False, True])
        for name in ("a", "b")
    ]
    task = _slow_task(tmp_path)
    out = tmp_path / "records"
    for args in (
        ["ingest", "lm-eval", runs[0], "--out", out, "--task", task, "--filter", "flexible-extract", "--trajectory", "t1"],
        ["compare-logs", runs[0], runs[1], "--task", task, "--filter", "flexible-extract"],
    ):
        started = time.monotonic()
        code, said = run_cli(args, capsys)
        assert time.monotonic() - started < 10, said
        refused(said, code, str(task), "item 'gsm8k-1'", "[answer] extract '^(a|aa)+$': no match decided")
    assert not out.exists()


# --------------------------------------------------------------------------- measure


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, one_thread):
    pytest.importorskip("peft")
    from tinyrun import build_tiny_run

    root = tmp_path_factory.mktemp("tiny")
    return build_tiny_run(root, steps=(1,), n_validation=3, n_test=2)


def _measure(tiny, task: Path, out: Path) -> list:
    return [
        "measure",
        tiny.run_dir,
        "--task",
        task,
        "--validation",
        tiny.validation,
        "--test",
        tiny.test,
        "--out",
        out,
        "--batch-size",
        "4",
        "--max-new-tokens",
        "24",
        "--no-progress",
    ]


MEASURED = fields('prompt = "question"\nreference = "answer"\nresponse = "answer"', "{answer}")


@pytest.mark.parametrize(
    ("answer", "scorer", "needle"),
    [
        ('scorer = "s.py:fn"', "import sys\nsys.exit(0)\n", "importing s.py raised SystemExit"),
        ('scorer = "s.py:fn"', "import sys\ndef fn(a, r):\n    sys.exit(0)\n", "scorer s.py:fn: raised SystemExit"),
        ('scorer = "s.py:fn"', "def fn(a, r):\n    return None\n", "returned NoneType"),
        ("extract = '(?s)^(.|..|...)*(?<=\\x00)'", "", "no match decided within 1 s"),
    ],
    ids=["exit at import", "exit at call", "returns None", "backtracking"],
)
def test_measure_refuses_a_failing_rule_in_one_line(tiny, tmp_path, capsys, answer, scorer, needle):
    (tmp_path / "s.py").write_text(scorer, encoding="utf-8")
    task = tmp_path / "m.toml"
    task.write_text(MEASURED.replace("{answer}", answer), encoding="utf-8")
    out = tmp_path / "records"
    code, said = run_cli(_measure(tiny, task, out), capsys)
    errors = [line for line in said.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in said, said
    assert str(task) in errors[0] and needle in errors[0], said
    if "import" not in needle:  # judged per generation: the item is named
        assert re.search(r"item 'hostile-\d+'", errors[0]), said
    assert not list(out.rglob("*.parquet")) if out.exists() else True  # nothing written


# --------------------------------------------------------------------------- issue 48 item 5


def test_a_reference_derived_by_regex_and_gsm8k_raw(tmp_path, capsys) -> None:
    from ckptsel.measure.config import MeasureConfig

    rows = [{"question": "3+4?", "answer": "3+4=<<3+4=7>>7\n#### 7"}]
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    task = tmp_path / "raw.toml"
    task.write_text(
        textwrap.dedent("""\
        name = "gsm-raw-file"
        [fields]
        prompt = "question"
        response = "answer"
        reference = "answer"
        reference_regex = '####\\s*(.+?)\\s*$'
        [answer]
        extract = "gsm8k"
        compare = "gsm8k"
        """),
        encoding="utf-8",
    )
    code, said = run_cli(["tasks", "show", task, "--items", items], capsys)
    assert code == 0, said
    assert "reference '7'" in said and "<<3+4=7>>7\n#### 7" in said
    assert "answer '7', correct" in said
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "q", "answer": "no final line"}) + "\n")
    code, said = run_cli(["tasks", "show", task, "--items", bad], capsys)
    refused(said, code, "bad.jsonl: line 1: field 'answer'", "finds no answer")
    code, said = run_cli(["tasks", "show", "gsm8k-raw", "--items", items], capsys)
    assert code == 0 and "<<3+4=7>>7\n#### 7" in said and "answer '7', correct" in said, said
    code, said = run_cli(["tasks", "show", "gsm8k", "--items", items], capsys)
    assert code == 0 and "The answer is: 7" in said and "<<" not in said.split("response")[-1]
    raw, rewritten = MeasureConfig(task="gsm8k-raw"), MeasureConfig(task="gsm8k")
    assert raw.nll_fingerprint() != rewritten.nll_fingerprint()
    assert raw.generation_fingerprint() != rewritten.generation_fingerprint()
