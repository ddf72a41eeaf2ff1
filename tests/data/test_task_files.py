"""Task files (``--task PATH.toml``): a task as data, scored exactly as it says (answers and
verdicts computed by hand), its identity in the measurement fingerprints, the built-in tasks'
fingerprints unchanged, an optional response, ``ckptsel tasks``; and end to end through the CLI
on a tiny model: ``measure --task my.toml`` and ``train STUDY.toml`` with a task file."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from ckptsel.data.answers.rules import AnswerRule
from ckptsel.data.scoring import extract, is_correct, normalize_reference
from ckptsel.data.taskdef import Item, item_hash
from ckptsel.data.tasks import get_task, load_items, task_identity, task_label
from ckptsel.errors import CkptselError
from ckptsel.measure.config import MeasureConfig

from clirun import run_cli

FIRSTWORD = """\
name = "firstword"
[fields]
prompt = "q"
response = "target"
reference = "gold"
id = "uid"
[answer]
extract = '^\\s*(\\S+)'
compare = "exact"
"""
ITEMS = [
    {"q": "Say hello", "target": "Hello there", "gold": "hello", "uid": "a1"},
    {"q": "Say bye", "target": "Bye now", "gold": "Bye", "uid": "a2"},
]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    return write(path, "".join(json.dumps(r) + "\n" for r in rows))


def task_file(tmp_path: Path, body: str, name: str = "t.toml") -> str:
    return str(write(tmp_path / name, body))


# --------------------------------------------------------------------------- scoring by hand


def test_firstword_task_scores_exactly_what_it_says(tmp_path: Path) -> None:
    task = task_file(tmp_path, FIRSTWORD)
    items = load_items(task, write_jsonl(tmp_path / "items.jsonl", ITEMS))
    assert items == [Item("a1", "Say hello", "hello", "Hello there", "a1", ""), Item("a2", "Say bye", "Bye", "Bye now", "a2", "")]
    # (text, gold) -> (answer, correct), by hand: the first run of non-space characters,
    # lower-cased with its white space collapsed, equal to the lower-cased gold
    cases = {
        ("Hello there", "hello"): ("hello", True),
        ("  bye now", "Bye"): ("bye", True),
        ("\n\nHELLO", "hello"): ("hello", True),  # \s matches the newlines
        ("Hi hello", "hello"): ("hi", False),
        ("HELLO, world", "hello"): ("hello,", False),  # the comma is part of \S+
        ("", "hello"): ("", False),
        ("   ", "hello"): ("", False),
    }
    for (text, gold), (answer, correct) in cases.items():
        assert extract(task, text) == answer, text
        assert is_correct(task, text, gold) is correct, text
    assert normalize_reference(task, " Bye ") == "bye"
    assert task_label(task) == "firstword" and get_task(task).name == "firstword"


def test_named_rules_and_comparisons_by_hand(tmp_path: Path) -> None:
    rules = {
        # extract, compare, settings -> [(text, gold, answer, correct)]
        ("last_number", "numeric", (("tolerance", 0.5),)): [
            ("first 3.4, then 10.2", "10", "10.2", True),  # |10.2 - 10| = 0.2 <= 0.5
            ("first 3.4, then 10.6", "10", "10.6", False),  # 0.6 > 0.5
            ("it is $1,000.", "1000", "1000", True),
            ("ten", "10", "", False),
        ],
        ("last_number", "numeric", ()): [("1/2", "0.5", "0.5", True), ("0.51", "0.5", "0.51", False)],
        ("answer_is", "exact", ()): [
            ("so. The answer is: Paris.\nmore", "paris", "paris", True),
            ("The answer is 4. The answer is 5", "4", "5", False),  # the last marker
        ],
        ("first_line", "exact", ()): [("\n Paris \nis the capital", "paris", "paris", True)],
        ("whole", "exact", ()): [("  New \n York ", "new york", "new york", True)],
        ("choice", "exact", ()): [
            ("I think the answer is (C).", "C", "c", True),
            ("B) because", "b", "b", True),
            ("A cat sat", "A", "", False),  # an article, not a choice
            ("Answer: D, not A", "D", "d", True),
        ],
        ("boxed", "math", ()): [
            ("so \\boxed{\\frac{1}{2}}", "0.5", "0.5", True),
            ("\\boxed{2} then \\boxed{3", "2", "2", True),  # the open box is ignored
        ],
        ("label", "labels", (("labels", ("yes", "no")),)): [
            ("I'd say No.", "no", "no", True),
            ("yesterday, no", "no", "no", True),  # 'yes' inside a word is no label
            ("maybe", "no", "", False),
        ],
        ("(?i)answer:\\s*(\\w+)", "exact", (("select", "last"),)): [
            ("ANSWER: a ... answer: b", "b", "b", True),
            ("nothing", "b", "", False),
        ],
        ("\\d+", "numeric", ()): [("x 12 y 13", "12", "12", True)],  # no group: the match
    }
    for (extract_rule, compare, settings), cases in rules.items():
        rule = AnswerRule(extract_rule, compare, **dict(settings))
        for text, gold, answer, correct in cases:
            assert rule.answer(text) == answer, (extract_rule, text)
            assert rule.is_correct(text, gold) is correct, (extract_rule, text)


def test_the_built_in_tasks_keep_their_family_rules() -> None:
    # one registry: the built-ins are definitions too, scored by their families' rules
    assert get_task("gsm8k").rule == AnswerRule("gsm8k", "gsm8k")
    assert get_task("math500").rule == AnswerRule("math", "math")
    assert get_task("piqa").rule == AnswerRule("commonsense", "exact")
    assert extract("gsm8k", "so 3,000 apples. The answer is: $3,000.") == "3000"
    assert is_correct("metamath", "The answer is \\frac{\\pi}{2}", "\\frac{\\pi}{2}")
    assert extract("piqa", "Solution2 is right, not solution1") == "solution2"
    assert extract("commonsense", "answer3", subtask="ARC-Easy") == "answer3"


def test_built_in_fingerprints_and_item_hashes_are_unchanged() -> None:
    """The part-file names of records measured before task files existed (values computed
    with the code before this change)."""
    expected = {
        ("gsm8k", None, None): ("cd169d982152dd5a", "afae559f5bd67562"),
        ("metamath", "gsm8k", None): ("88e74b90f9a25bd6", "3c78ac27dba75e8c"),
        ("math500", None, None): ("5245f1db23abc0a2", "ff863f8ddac95fec"),
        ("boolq", None, 64): ("2610edc45fbe7d78", "87bec0cb41265b3e"),
    }
    for (task, test_task, window), prints in expected.items():
        extra = {"window": window} if window else {}
        cfg = MeasureConfig(task=task, test_task=test_task, **extra)
        assert (cfg.generation_fingerprint(), cfg.nll_fingerprint()) == prints, task
        assert cfg.task == task  # a name stays as given (so do the records' task column)
    item = Item("gsm8k-0", "Q?", "7", "The answer is: 7", "gsm8k-0", "")
    assert item_hash(item) == "f8406aacc12bfa7b"


def test_a_task_files_content_names_its_measurements(tmp_path: Path, monkeypatch) -> None:
    path = Path(task_file(tmp_path, FIRSTWORD))
    first = MeasureConfig(task=str(path))
    assert first.task == str(path.resolve())
    prints = first.generation_fingerprint(), first.nll_fingerprint()
    monkeypatch.chdir(tmp_path)
    relative = MeasureConfig(task="t.toml")  # the same file from its folder: the same
    assert relative.task == first.task
    assert relative.generation_fingerprint() == prints[0]
    copy = task_file(tmp_path / "elsewhere", FIRSTWORD)  # moved: the same content, reused
    assert MeasureConfig(task=copy).nll_fingerprint() == prints[1]
    write(path, FIRSTWORD.replace('"exact"', '"labels"\nlabels = ["hello", "bye"]'))
    edited = MeasureConfig(task=str(path))  # edited: measured again
    assert edited.generation_fingerprint() != prints[0]
    assert edited.nll_fingerprint() != prints[1]
    assert task_identity(str(path)) == f"firstword@{get_task(str(path)).digest}"
    mixed = MeasureConfig(task="gsm8k", test_task=str(path))
    assert mixed.generation_fingerprint() != MeasureConfig(task="gsm8k").generation_fingerprint()


# --------------------------------------------------------------------------- fields


def test_fields_lists_dotted_paths_defaults_and_strata(tmp_path: Path) -> None:
    task = task_file(
        tmp_path,
        """\
        name = "nested"
        [fields]
        prompt = ["doc.question", "doc.context"]
        reference = "doc.gold"
        group = "src"
        stratum = "kind"
        [answer]
        extract = "last_number"
        compare = "numeric"
        """,
    )
    rows = [
        {"doc": {"question": "2+2?", "context": "add", "gold": 4}, "src": "g1", "kind": "add"},
        {"doc": {"question": "3+3?", "context": "", "gold": "6"}, "kind": "add"},
    ]
    items = load_items(task, write_jsonl(tmp_path / "nested.jsonl", rows))
    assert items == [Item("nested-0", "2+2?\n\nadd", "4", None, "g1", "add"), Item("nested-1", "3+3?", "6", None, "nested-1", "add")]
    assert not get_task(task).has_response


@pytest.mark.parametrize(
    ("body", "items", "message"),
    [
        (FIRSTWORD.replace('compare = "exact"', 'compare = "fuzzy"'), None, r"t\.toml: \[answer\] compare: unknown rule 'fuzzy'"),
        (FIRSTWORD.replace("'^\\s*(\\S+)'", "'(unclosed'"), None, r"\[answer\] extract: '\(unclosed' is no rule .* and no valid regex"),
        (FIRSTWORD + "group = 2\n", None, r"\[answer\] group: 2 is not a group"),
        (FIRSTWORD.replace('name = "firstword"', 'name = "gsm8k"'), None, r"name 'gsm8k' is a built-in task's"),
        (FIRSTWORD.replace('prompt = "q"\n', ""), None, r"\[fields\] needs 'prompt'"),
        (FIRSTWORD.replace('id = "uid"', 'idd = "uid"'), None, r"\[fields\] unknown key 'idd'"),
        (FIRSTWORD + "tolerance = 1\n", None, r"tolerance: .*numeric' only"),
        (FIRSTWORD.replace('compare = "exact"', 'compare = "labels"'), None, r"\[answer\] labels: a non-empty list"),
        (
            FIRSTWORD.replace('compare = "exact"', 'compare = "labels"\nlabels = ["hello"]'),
            ITEMS,
            r"items\.jsonl: line 2: field 'gold' 'Bye' is not one of the labels",
        ),
        (
            FIRSTWORD.replace('compare = "exact"', 'compare = "numeric"'),
            ITEMS,
            r"items\.jsonl: line 1: field 'gold' 'hello' holds no number",
        ),
        (FIRSTWORD, [{"q": "x", "target": "y", "uid": "u"}], r"items\.jsonl: line 1: missing required field 'gold'"),
        ("name = 'x'\n[fields\n", None, r"t\.toml: invalid TOML"),
        (FIRSTWORD + 'scorer = "m:f"\n', None, r"\[answer\] give compare or scorer, not both"),
        (FIRSTWORD.replace('"firstword"', '"firstword"\ncolour = "red"'), None, r"t\.toml: unknown key 'colour'"),
    ],
)
def test_bad_task_files_are_one_line_naming_file_and_key(tmp_path, body, items, message):
    task = task_file(tmp_path, body)
    with pytest.raises(CkptselError, match=message) as err:
        if items is None:
            get_task(task)
        else:
            load_items(task, write_jsonl(tmp_path / "items.jsonl", items))
    assert "\n" not in str(err.value)


def test_a_scorer_file_beside_the_task_file_is_imported_only_to_judge(tmp_path) -> None:
    write(
        tmp_path / "myscorer.py",
        """\
        from pathlib import Path
        LOG = Path(__file__).with_name("calls.txt")
        LOG.write_text("imported\\n")
        def reversed_gold(answer, reference):
            LOG.write_text(LOG.read_text() + f"{answer} {reference}\\n")
            return answer == reference[::-1]
        def broken(answer, reference):
            raise ValueError("no way")
        def not_bool(answer, reference):
            return "yes"
        """,
    )
    body = FIRSTWORD.replace('compare = "exact"', 'scorer = "myscorer.py:reversed_gold"')
    task = task_file(tmp_path, body)
    log = tmp_path / "calls.txt"
    assert get_task(task).rule.runs_code == "myscorer.py:reversed_gold"
    assert extract(task, "  Olleh  x") == "Olleh"  # white space collapsed, case kept
    assert not log.exists()  # reading the task and extracting answers ran no code
    assert is_correct(task, "olleh world", "hello") and not is_correct(task, "hello", "hello")
    assert log.read_text() == "imported\nolleh hello\nhello hello\n"  # the extracted answer
    for scorer, message in [
        ("nomodule_xyz:f", r"write it as 'score\.py:function'.*never imported from a task file"),
        ("missing.py:f", r"scorer 'missing\.py:f': no file "),
        ("not a spec", r"write it as 'score\.py:function'"),
    ]:
        bad = task_file(tmp_path, body.replace("myscorer.py:reversed_gold", scorer), f"{scorer[:3]}.toml")
        with pytest.raises(CkptselError, match=message):
            get_task(bad)
    missing = task_file(tmp_path, body.replace("reversed_gold", "missing"), "m.toml")
    with pytest.raises(
        CkptselError,
        match=r"m\.toml: \[answer\] scorer 'myscorer\.py:missing': "
        r"myscorer\.py has no function 'missing'",
    ):
        is_correct(missing, "x", "y")
    raising = task_file(tmp_path, body.replace("reversed_gold", "broken"), "b.toml")
    with pytest.raises(CkptselError, match=r"scorer myscorer\.py:broken: raised ValueError: no way"):
        is_correct(raising, "x", "y")
    returning = task_file(tmp_path, body.replace("reversed_gold", "not_bool"), "n.toml")
    with pytest.raises(CkptselError, match=r"returned str, not a bool"):
        is_correct(returning, "x", "y")


# --------------------------------------------------------------------------- ckptsel tasks


def test_tasks_lists_and_shows_a_task_file_and_a_built_in(tmp_path, capsys) -> None:
    code, said = run_cli(["tasks"], capsys)
    assert code == 0
    assert re.search(r"^gsm8k\s+gsm8k / gsm8k\s+GSM8K", said, re.MULTILINE)
    assert re.search(r"^ARC-Challenge\s+arc_challenge\s+commonsense / exact", said, re.MULTILINE)
    task = task_file(tmp_path, FIRSTWORD)
    items = write_jsonl(tmp_path / "items.jsonl", ITEMS)
    code, said = run_cli(["tasks", "show", task, "--items", items, "--index", "1"], capsys)
    assert code == 0, said
    assert f"task file {Path(task).resolve()} (content hash {get_task(task).digest})" in said
    assert re.search(r"^  reference  gold$", said, re.MULTILINE)
    assert re.search(r"^  group      -  \(none: the item id\)$", said, re.MULTILINE)
    assert "extract: regex '^\\s*(\\S+)', group 1 of the first match" in said
    assert "### Instruction:\nSay bye\n\n### Response:\n" in said
    assert "answer 'bye', correct" in said
    code, said = run_cli(["tasks", "show", "math500"], capsys)
    assert code == 0 and "\\boxed{\\frac{5}{6}}" in said and "answer '5/6', correct" in said
    code, said = run_cli(["tasks", "show", str(tmp_path / "missing.toml")], capsys)
    assert code == 2 and said.strip() == f"error: {tmp_path / 'missing.toml'}: task file not found"


# --------------------------------------------------------------------------- a response is optional


def test_without_a_response_there_is_no_nll_and_no_training(tmp_path) -> None:
    from ckptsel.measure.parts import ItemPool, left_to_measure

    body = FIRSTWORD.replace('response = "target"\n', "")
    task = task_file(tmp_path, body)
    items = load_items(task, write_jsonl(tmp_path / "items.jsonl", ITEMS))
    assert [it.response for it in items] == [None, None]
    with pytest.raises(CkptselError, match=r"--only nll: task firstword has no response field"):
        MeasureConfig(task=task, only="nll")
    cfg = MeasureConfig(task=task)
    pool = ItemPool.load(task, items, items[:1])
    todo = left_to_measure(tmp_path / "records", "t", [1], cfg, pool)[0]
    assert (todo.generate, todo.score, todo.unrecorded) == (3, 0, 3)  # generations only
    with_nll = ItemPool.load("gsm8k", items, [Item("x", "q", "1", "The answer is 1", "x")])
    todo = left_to_measure(tmp_path / "records", "t", [1], MeasureConfig(task="gsm8k"), with_nll)[0]
    assert (todo.generate, todo.score, todo.unrecorded) == (3, 1, 4)  # the test item's NLL


def test_a_study_pool_of_a_task_file(tmp_path: Path) -> None:
    from ckptsel.study.spec import load_spec

    body = FIRSTWORD.replace('id = "uid"', 'id = "uid"\ngroup = "src"')
    write(tmp_path / "tasks" / "fw.toml", body)
    write_jsonl(tmp_path / "pool.jsonl", [{**r, "src": "s"} for r in ITEMS])
    study = write(
        tmp_path / "study.toml",
        """\
        schema = 2
        [study]
        base_model = "some/model"
        [pool]
        task = "tasks/fw.toml"
        file = "pool.jsonl"
        [test]
        task = "tasks/fw.toml"
        file = "pool.jsonl"
        [[configurations]]
        name = "a"
        steps = 2
        """,
    )
    spec = load_spec(study)
    task = str((tmp_path / "tasks" / "fw.toml").resolve())  # relative to the study file
    assert spec.split.task == spec.validation.task == spec.test.task == task
    assert spec.split.group_field == "src"  # the task file's group field splits the pool
    write(tmp_path / "tasks" / "fw.toml", body.replace('response = "target"\n', ""))
    with pytest.raises(CkptselError, match=r"\[pool\] task: firstword has no response field"):
        load_spec(study)


def test_ingest_lm_eval_logs_with_a_task_file(tmp_path, capsys) -> None:
    from ckptsel.records.scan import read_frame
    from lmevalcase import gsm8k_checkpoint

    folder = gsm8k_checkpoint(
        tmp_path / "evals" / "run-x" / "checkpoint-100", ["3 + 15 = 18\n#### 18", "It is $1,234.", "7 - 2 = 4\n#### 4"], [True, True, False]
    )
    task = task_file(
        tmp_path,
        """\
        name = "gsm8k-first"
        [fields]
        prompt = "question"
        reference = "answer"
        [answer]
        extract = '(\\d[\\d,]*)'
        compare = "numeric"
        """,
    )
    code, said = run_cli(
        ["ingest", "lm-eval", folder, "--out", tmp_path / "records", "--task", task, "--filter", "flexible-extract", "--trajectory", "t1"],
        capsys,
    )
    assert code == 0, said
    gen = read_frame(tmp_path / "records", "generations").set_index("item_id")
    assert set(gen["task"]) == {"gsm8k-first"}  # the task file's name
    # the rule read lm-eval's filtered responses ('18', '$1234.', '4'): the first number, in
    # numeric normal form; the verdicts are the harness's; the lm-eval task is the subtask
    assert gen["answer"].tolist() == ["18", "1234", "4"]
    assert gen["correct"].tolist() == [True, True, False]
    assert set(gen["subtask"]) == {"gsm8k"}


# --------------------------------------------------------------------------- end to end, tiny model


def _measure_args(run, task: str, validation: Path, test: Path, out: Path) -> list:
    return [
        "measure",
        run.run_dir,
        "--task",
        task,
        "--validation",
        validation,
        "--test",
        test,
        "--out",
        out,
        "--batch-size",
        "4",
        "--max-new-tokens",
        "6",
        "--no-progress",
    ]


@pytest.mark.usefixtures("one_thread")
def test_measure_with_a_task_file_through_the_cli(tmp_path, capsys) -> None:
    pytest.importorskip("peft")
    from ckptsel.records.scan import read_frame, read_rows

    from tinyrun import build_tiny_run, make_gsm8k_rows

    run = build_tiny_run(tmp_path, steps=(1, 2), n_validation=2, n_test=2)
    rows = [
        {"q": r["question"], "target": r["answer"], "gold": r["answer"].split()[0], "uid": f"u{i}"}
        for i, r in enumerate(make_gsm8k_rows(7, seed=3))
    ]
    val = write_jsonl(tmp_path / "data" / "val.jsonl", rows[:4])
    test = write_jsonl(tmp_path / "data" / "test.jsonl", rows[4:])
    task = task_file(tmp_path, FIRSTWORD, "firstword.toml")
    out = tmp_path / "records"
    code, said = run_cli(_measure_args(run, task, val, test, out), capsys)
    assert code == 0, said
    assert "2 checkpoints (2 measured)" in said and "no NLL" not in said
    gen, nll = read_frame(out, "generations"), read_frame(out, "nll")
    assert set(gen["task"]) == {"firstword"}  # the task file's name, not its path
    assert len(gen) == 2 * 7 and len(nll) == 2 * 7 * 2  # both windows of every item
    gold = {r["uid"]: r["gold"] for r in rows}
    for _, row in gen.iterrows():  # the answer rule, applied by hand to the recorded text
        first = re.match(r"^\s*(\S+)", row["text"])
        answer = first.group(1).lower() if first else ""
        assert row["answer"] == answer
        assert bool(row["correct"]) is (bool(answer) and answer == gold[row["item_id"]].lower())
    # again: everything reused; an edited task file (a new answer rule) is measured again
    code, said = run_cli(_measure_args(run, task, val, test, out), capsys)
    assert code == 0 and "(0 measured, 2 already recorded)" in said, said
    write(Path(task), FIRSTWORD.replace("'^\\s*(\\S+)'", "'(\\S+)\\s*$'"))
    code, said = run_cli(_measure_args(run, task, val, test, out), capsys)
    assert code == 0 and "(2 measured)" in said, said
    gen = read_frame(out, "generations")
    assert len(gen) == 14
    for _, row in gen.iterrows():
        last = re.search(r"(\S+)\s*$", row["text"])
        assert row["answer"] == (last.group(1).lower() if last else "")
    # no response field: generations only, said in one line
    silent = task_file(
        tmp_path, FIRSTWORD.replace('response = "target"\n', "").replace('name = "firstword"', 'name = "firstword-eval"'), "eval.toml"
    )
    out2 = tmp_path / "records2"
    code, said = run_cli(_measure_args(run, silent, val, test, out2), capsys)
    assert code == 0, said
    assert "no NLL rows for task firstword-eval: it has no response field" in said
    assert len(read_frame(out2, "generations")) == 14
    assert read_rows(out2, "nll") is None  # not one NLL row


@pytest.mark.usefixtures("one_thread")
def test_train_a_study_whose_tasks_are_task_files(tmp_path, capsys) -> None:
    pytest.importorskip("peft")
    from ckptsel.sim.tiny import save_tiny
    from ckptsel.train.checkpoints import checkpoint_steps

    rows = [
        {"q": f"Say word {w}", "target": f"{w} is the word", "gold": w, "uid": f"w{i}"}
        for i, w in enumerate(["apple", "pear", "plum", "fig", "kiwi", "lime", "date", "nut"])
    ]
    base = save_tiny(tmp_path / "base", [f"{r['q']} {r['target']}" for r in rows], vocab_size=200, hidden_size=32, layers=1, heads=2)
    write_jsonl(tmp_path / "data" / "train.jsonl", rows[:6])
    write_jsonl(tmp_path / "data" / "val.jsonl", rows[6:7])
    write_jsonl(tmp_path / "data" / "test.jsonl", rows[7:])
    write(tmp_path / "tasks" / "firstword.toml", FIRSTWORD)
    study = write(
        tmp_path / "study.toml",
        f"""\
        schema = 2
        [study]
        base_model = "{base}"
        seeds = [1]
        [train]
        task = "tasks/firstword.toml"
        file = "data/train.jsonl"
        [validation]
        task = "tasks/firstword.toml"
        file = "data/val.jsonl"
        [test]
        task = "tasks/firstword.toml"
        file = "data/test.jsonl"
        [[configurations]]
        name = "lora"
        adaptation = "lora"
        rank = 2
        alpha = 4
        lr = 1e-2
        steps = 4
        save_every = 2
        batch_size = 2
        micro_batch = 2
        """,
    )
    code, said = run_cli(["train", study], capsys)
    assert code == 0, said
    assert checkpoint_steps(tmp_path / "runs" / "lora-s1") == [2, 4]
    # a task without a response has nothing to fine-tune on: refused in one line
    write(tmp_path / "tasks" / "firstword.toml", FIRSTWORD.replace('response = "target"\n', ""))
    code, said = run_cli(["train", study], capsys)
    assert code == 2 and said.count("\n") == 1, said
    assert "[train] task: firstword has no response field: nothing to fine-tune on" in said


@pytest.mark.usefixtures("one_thread")
def test_measure_model_scores_no_nll_for_items_without_a_response(tmp_path) -> None:
    pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM

    from ckptsel.measure.conformance import check_conformance, pick_items
    from ckptsel.measure.measurer import measure_model
    from ckptsel.train.models import load_tokenizer

    from tinyrun import build_tiny_base

    base = build_tiny_base(tmp_path / "base", ["Say hello. Hello there", "Say bye. Bye now"])
    model = AutoModelForCausalLM.from_pretrained(str(base))
    tok = load_tokenizer(str(base))
    task = task_file(tmp_path, FIRSTWORD.replace('response = "target"\n', ""))
    items = load_items(task, write_jsonl(tmp_path / "items.jsonl", ITEMS))
    with_response = Item("r1", "Say hi", "hi", "Hi you", "r1")
    cfg = MeasureConfig(task=task, max_new_tokens=3, batch_size=2)
    assert isinstance(check_conformance(model, tok, items, cfg), str)
    assert [it.response for it in pick_items(items)] == ["", ""]  # checked on an empty response
    gen, nll = measure_model(model, tok, [*items, with_response], cfg, split="validation", trajectory="t-s1", step=1)
    assert gen["item_id"].tolist() == ["a1", "a2", "r1"] and set(gen["task"]) == {"firstword"}
    assert set(nll["item_id"]) == {"r1"}  # the item with a response alone


def test_tasks_show_renders_the_prompt_format_asked_for(tmp_path, capsys) -> None:
    pytest.importorskip("transformers")
    from transformers import AutoTokenizer

    from tinyrun import build_tiny_base

    base = build_tiny_base(tmp_path / "base", ["user: Say bye\nassistant: Bye now"])
    tok = AutoTokenizer.from_pretrained(str(base))
    tok.chat_template = (
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
    )
    tok.save_pretrained(str(base))
    task = task_file(tmp_path, FIRSTWORD)
    items = write_jsonl(tmp_path / "items.jsonl", ITEMS)
    show = ["tasks", "show", task, "--items", items, "--index", "1"]
    code, said = run_cli([*show, "--prompt-format", "chat", "--tokenizer", base, "--system-prompt", "Be brief."], capsys)
    assert code == 0, said
    assert "as the model sees it (chat (the tokenizer's chat template, chat[" in said
    assert "):\nsystem: Be brief.\nuser: Say bye\nassistant:\n" in said
    template = write(tmp_path / "qa.jinja", "Q: {{ prompt }} [{{ id }}]\nA:")
    code, said = run_cli([*show, "--prompt-format", template], capsys)
    assert code == 0 and "):\nQ: Say bye [a2]\nA:\n" in said, said
    code, said = run_cli([*show, "--prompt-format", "chat"], capsys)
    assert code == 2 and "--prompt-format chat needs --tokenizer DIR" in said
