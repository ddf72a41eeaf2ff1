"""A researcher's own selection rule (``--rule FILE.py:fn``, ``[rules.NAME]``): it goes through the
same budgets, freeze, G/H/D and intervals as the built-in rules; a copy of a built-in rule chooses
exactly as it does; its signal sees validation records only (test records are refused while it
runs, labels unless it declares them); ``verify`` runs it only when the user names its file again,
with the same bytes; every hostile rule is one line, exit code 2, and no results folder."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from tests.clirun import run_cli
from tests.recordsgen import random_study, tables
from tests.recordsgen import write as write_records
from tests.tinyrun import MINIMAL, gsm_rows, jsonl, write

from ckptsel.choose.rules import UserRule, user_rule
from ckptsel.choose.settings import ChoiceSettings
from ckptsel.errors import CkptselError
from ckptsel.study.spec import load_spec
from ckptsel.workflows.analysis import analyze
from ckptsel.workflows.study_run.context import StudyContext

RULES_PY = """
import numpy as np

def acc(v):
    return v.correct
acc.uses_labels = True

def neg_nll(v):
    return -v.nll[512]

def big(v):
    return v.answers.astype(np.int64) * 3_000_000 + np.arange(v.answers.shape[1]) % 2

def big_float(v):
    return big(v).astype(np.float64)

def rewarded(v):
    return v.scores("reward")

def shortest(v):
    texts = v.texts()
    return -np.vectorize(lambda t: len(t or ""))(texts)
"""


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> Path:
    """A random study's records, with generated texts of random length on every row."""
    root = tmp_path_factory.mktemp("own")
    gen, nll = tables(random_study(np.random.default_rng(3)))
    rng = np.random.default_rng(4)
    gen["text"] = pd.array(["x" * int(k) for k in rng.integers(1, 40, len(gen))], dtype="string")
    gen["score_reward"] = rng.normal(size=len(gen))  # a reward model's score per generation
    gen["score_bad"] = "high"
    write_records(root / "rec", gen, nll)
    (root / "rules.py").write_text(RULES_PY)
    return root / "rec"


def _rules(records: Path, *specs: str) -> tuple[UserRule, ...]:
    out = []
    for spec in specs:  # NAME=function or function, of rules.py
        name, _, function = spec.rpartition("=")
        out.append(user_rule(f"rules.py:{function}", name=name or None, base=str(records.parent)))
    return tuple(out)


def _choices(results: Path, rule: str) -> pd.DataFrame:
    t = pd.read_parquet(results / "choices" / "choices.parquet")
    t = t[(t["rule"] == rule) & (t["scheme"] != "nll_complete")]
    return t.drop(columns="rule").reset_index(drop=True)


def test_a_copy_of_a_built_in_rule_chooses_and_estimates_exactly_as_it_does(records, tmp_path):
    """``acc`` (the labels, as counts) and ``negnll`` (minus the matched-window NLL, maximized: the
    float path) choose what accuracy and matched NLL choose, in every scheme, and their G, H and
    D come out equal to the last digit."""
    summary = analyze(records, tmp_path / "res", permutations=20, draws=200, rules=_rules(records, "acc", "negnll=neg_nll"))
    res = tmp_path / "res"
    for mine, theirs in (("acc", "accuracy"), ("negnll", "nll")):
        assert len(_choices(res, mine)) > 50
        pd.testing.assert_frame_equal(_choices(res, mine), _choices(res, theirs))
        for q in ("G", "D"):
            assert summary.gains.get(q, mine).to_dict() == summary.gains.get(q, theirs).to_dict()
    assert summary.gains.get("H", "acc").to_dict() == summary.gains.get("H", "accuracy").to_dict()
    assert list(summary.to_dict()["budget"]) == ["accuracy", "agreement", "nll", "last", "acc", "negnll"]
    frozen = json.loads((res / "choices" / "choices.sha256").read_text())["settings"]
    assert [r["name"] for r in frozen["rules"]] == ["acc", "negnll"]
    assert frozen["rules"][0]["uses_labels"] is True and len(frozen["rules"][0]["sha256"]) == 64


def test_without_own_rules_the_choices_settings_hash_as_before():
    assert "rules" not in ChoiceSettings().to_dict()


def test_shortest_response_analysed_and_verified_from_the_cli(records, tmp_path, capsys):
    """The issue's example, as a user types it: the full-pool choice is the checkpoint with the
    least generated text over the validation pool (by hand); the main table, the report and
    summary.json carry the rule; ``verify`` reproduces it with the file named again, refuses
    without it and refuses an edited file."""
    res = tmp_path / "res"
    rule = f"{records.parent / 'rules.py'}:shortest"
    code, said = run_cli(["analyze", records, "--out", res, "--permutations", 20, "--draws", 200, "--rule", rule], capsys)
    assert code == 0, said
    assert "shortest" in said  # the main table's row
    summary = json.loads((res / "summary.json").read_text())
    assert "shortest" in summary["budget"] and "shortest" in summary["D"]
    assert "your rule shortest" in (res / "report.html").read_text()
    assert set(json.loads((res / "choices" / "budget_items.json").read_text())["settings"]) == {"permutations", "seed", "budgets"}
    for table in ("main_table", "budget_curves", "sensitivities"):
        assert "shortest" in set(pd.read_csv(res / "tables" / f"{table}.csv")["rule"]), table

    gen = pd.read_parquet(records / "generations.parquet")
    val = gen[gen["split"] == "validation"].assign(length=lambda d: d["text"].str.len())
    full = _choices(res, "shortest").query("scheme == 'nested' and budget == 'full'")
    for traj, rows in val.groupby("trajectory"):
        totals = rows.groupby("step")["length"].sum()
        best = sorted(totals[totals == totals.min()].index)
        got = full[full["trajectory"] == traj]
        assert sorted(got["step"]) == best and np.allclose(got["prob"], 1 / len(best))

    code, said = run_cli(["verify", res, "--rule", rule], capsys)
    assert code == 0 and "reproduced exactly" in said, said
    code, said = run_cli(["verify", res], capsys)
    assert code == 2 and "rule 'shortest' is your own code" in said and len(said.strip().splitlines()) == 1, said
    edited = tmp_path / "rules.py"
    edited.write_text(RULES_PY + "\n# edited\n")
    code, said = run_cli(["verify", res, "--rule", f"{edited}:shortest"], capsys)
    assert code == 2 and "the analysis used" in said and "sha256" in said, said


HOSTILE = {
    "reads test records": (
        "def f(v):\n    from ckptsel.records.load import load_test\n    load_test(RECORDS)\n    return v.answers\n",
        "test records are read only after the choices are frozen",
    ),
    "reads test texts": (
        "def f(v):\n    from ckptsel.records.load import load_texts\n    load_texts(RECORDS, v.trajectory, 'test')\n    return v.answers\n",
        "test records are read only after the choices are frozen",
    ),
    "labels not declared": ("def f(v):\n    return v.correct\n", "declared uses_labels = false"),
    "a score column that is not there": ("def f(v):\n    return v.scores('judge')\n", "no per-item score column 'score_judge'"),
    "a score column of text": ("def f(v):\n    return v.scores('bad')\n", "column 'score_bad' has type"),
    "a score name that is not a name": ("def f(v):\n    return v.scores('../x')\n", "name a column score_<name>"),
    "writes its input": ("def f(v):\n    v.answers[0, 0] = 1\n    return v.answers\n", "read-only"),
    "wrong shape": ("def f(v):\n    return v.answers[:, :3]\n", "returned shape"),
    "NaN": ("import numpy as np\ndef f(v):\n    return np.full(v.answers.shape, np.nan)\n", "every value must be finite"),
    "strings": ("import numpy as np\ndef f(v):\n    return np.full(v.answers.shape, 'a')\n", "give numbers"),
    "None": ("def f(v):\n    return None\n", "returned object values"),
    "raises": ("def f(v):\n    raise ValueError('boom')\n", "raised ValueError: boom"),
    "exits at call": ("import sys\ndef f(v):\n    sys.exit(3)\n", "raised SystemExit: 3"),
    "exits at import": ("import sys\nsys.exit(0)\ndef f(v):\n    return v.answers\n", "importing rules_h.py raised SystemExit"),
    "not a function": ("f = 3\n", "rules_h.py has no function 'f'"),
    "huge values": ("import numpy as np\ndef f(v):\n    return np.full(v.answers.shape, np.inf)\n", "every value must be finite"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_rule_stops_in_one_line_and_writes_no_results(case, records, tmp_path, capsys):
    body, needle = HOSTILE[case]
    (tmp_path / "rules_h.py").write_text(body.replace("RECORDS", repr(str(records))))
    res = tmp_path / "res"
    code, said = run_cli(
        ["analyze", records, "--out", res, "--permutations", 5, "--draws", 50, "--rule", f"{tmp_path}/rules_h.py:f"], capsys
    )
    errors = [line for line in said.splitlines() if line.startswith("error")]
    assert code == 2 and len(errors) == 1 and needle in errors[0], said
    assert not (res / "summary.json").exists()


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("accuracy=RULES:acc", "is a built-in rule's"),
        ("Bad-Name=RULES:acc", "lower-case letters"),
        ("RULES", "write it as 'rules.py:function'"),
        ("numpy:sum", "a module is never imported"),
        ("missing.py:f", "no file"),
        ("RULES:nope", "has no function 'nope'"),
    ],
)
def test_a_bad_rule_option_is_one_line(value, needle, records, tmp_path, capsys):
    value = value.replace("RULES", str(records.parent / "rules.py"))
    code, said = run_cli(["analyze", records, "--out", tmp_path / "res", "--rule", value], capsys)
    assert code == 2 and needle in said and len(said.strip().splitlines()) == 1, said


def test_two_rules_of_one_name_are_refused(records, tmp_path, capsys):
    rule = f"{records.parent / 'rules.py'}:acc"
    code, said = run_cli(["analyze", records, "--out", tmp_path / "res", "--rule", rule, "--rule", rule], capsys)
    assert code == 2 and "each name once" in said, said


@pytest.fixture
def study_dir(tmp_path: Path) -> Path:
    for name in ("train", "val", "test"):
        jsonl(tmp_path / f"{name}.jsonl", gsm_rows(4))
    (tmp_path / "rules.py").write_text(RULES_PY)
    return tmp_path


def _study_rules(study_dir: Path, table: str):
    path = write(study_dir / "study.toml", MINIMAL + table)
    return StudyContext(load_spec(path)).analysis.choice.rules


def test_a_study_names_its_rules_beside_it(study_dir):
    (rule,) = _study_rules(study_dir, '[rules.short]\nsignal = "rules.py:shortest"\nmaximize = true\n')
    assert (rule.name, rule.signal, rule.maximize, rule.uses_labels) == ("short", "rules.py:shortest", True, False)
    assert rule.function is not None
    (rule,) = _study_rules(study_dir, '[rules.labels]\nsignal = "rules.py:acc"\n')
    assert rule.uses_labels  # the function's own attribute


@pytest.mark.parametrize(
    ("table", "needle"),
    [
        ('[rules.out]\nsignal = "../rules.py:acc"\n', "must be a relative path inside the study file's folder"),
        ("[rules.x]\nmaximize = true\n", "needs signal"),
        ('[rules.x]\nsignal = "rules.py:acc"\nweight = 2\n', "unknown key"),
        ('[rules.x]\nsignal = "rules.py:acc"\nuses_labels = false\n', "uses_labels = False, but rules.py:acc says uses_labels = True"),
        ("[rules.x]\nsignal = 3\n", "must be str"),
        ("[rules]\nx = 3\n", "must be a table"),
    ],
)
def test_a_bad_rules_table_names_the_study_file(study_dir, table, needle):
    with pytest.raises(CkptselError) as err:
        _study_rules(study_dir, table)
    assert needle in str(err.value) and "study.toml" in str(err.value)


def test_select_with_your_rule_answers_as_the_rule_it_copies(records, capsys):
    """``select --rule rules.py:neg_nll`` reports the rule beside the built-in ones, with matched
    NLL's choice, budget curve and gains, and its recommendation follows it; ``--all`` too."""
    rule = f"{records.parent / 'rules.py'}:neg_nll"
    args = ["select", records, "--trajectory", "c0-s0", "--draws", 200, "--partitions", 40, "--json"]
    code, said = run_cli([*args, "--rule", rule], capsys)
    assert code == 0, said
    answer = json.loads(said[said.index("{") :])
    rules = answer["rules"]
    assert list(rules) == ["accuracy", "agreement", "nll", "neg_nll"]
    assert rules["neg_nll"] == rules["nll"]
    assert answer["recommendation"]["rule"] == "neg_nll"
    code, said = run_cli(["select", records, "--all", "--draws", 200, "--partitions", 40, "--rule", rule, "--json"], capsys)
    assert code == 0, said
    assert json.loads(said[said.index("{") :])["rule"] == "neg_nll"


def test_select_refuses_a_rule_that_reads_test_records_and_logging_your_rule(records, tmp_path, capsys):
    (tmp_path / "peek.py").write_text(HOSTILE["reads test records"][0].replace("RECORDS", repr(str(records))))
    args = ["select", records, "--trajectory", "c0-s0", "--draws", 100, "--partitions", 20]
    code, said = run_cli([*args, "--rule", f"{tmp_path}/peek.py:f"], capsys)
    assert code == 2 and "test records are read only after the choices are frozen" in said, said
    code, said = run_cli([*args, "--rule", f"{records.parent / 'rules.py'}:acc", "--log", "mlflow"], capsys)
    assert code == 2 and "--log logs a built-in rule's selection" in said, said


def test_an_integer_signal_too_large_for_exact_counts_chooses_by_its_exact_sums(records, tmp_path):
    """Sums of ``big`` pass 2**24, where float32 count products are not exact: it is summed as the
    float signal it equals (the same choices as ``big_float``), and the full pool's choice is
    the brute-force argmax of its exact integer sums."""
    analyze(records, tmp_path / "res", permutations=10, draws=100, rules=_rules(records, "big", "big_float"))
    res = tmp_path / "res"
    pd.testing.assert_frame_equal(_choices(res, "big"), _choices(res, "big_float"))
    from ckptsel.records.load import load_validation

    full = _choices(res, "big").query("scheme == 'nested' and budget == 'full'")
    for v in load_validation(records):
        sums = (v.answers.astype(object) * 3_000_000 + np.arange(v.answers.shape[1]) % 2).sum(axis=1)  # Python ints
        best = [int(s) for s, x in zip(v.steps, sums, strict=True) if x == max(sums)]
        assert sorted(full[full["trajectory"] == v.trajectory]["step"]) == best


def test_a_rule_reads_a_per_item_score_column_of_the_validation_records(records, tmp_path):
    """``v.scores("reward")`` is the generation records' ``score_reward`` on the validation
    items, checkpoint by checkpoint: the full pool's choice is the step with the largest total
    reward (by hand)."""
    analyze(records, tmp_path / "res", permutations=10, draws=100, rules=_rules(records, "rewarded"))
    gen = pd.read_parquet(records / "generations.parquet")
    val = gen[gen["split"] == "validation"]
    full = _choices(tmp_path / "res", "rewarded").query("scheme == 'nested' and budget == 'full'")
    for traj, rows in val.groupby("trajectory"):
        totals = rows.groupby("step")["score_reward"].sum()
        assert list(full[full["trajectory"] == traj]["step"]) == [int(totals.idxmax())]


def test_a_study_run_analyses_its_rules(records, study_dir, capsys):
    """``ckptsel run STUDY --only analyze`` with ``[rules.negnll]``: the study's results carry the
    rule, choosing as matched NLL does."""
    extra = '[analysis]\npermutations = 10\ndraws = 100\n[rules.negnll]\nsignal = "rules.py:neg_nll"\n'
    text = MINIMAL.replace("seeds = [1]", f'seeds = [1]\nrecords_dir = "{records}"\nresults_dir = "res"') + extra
    study = write(study_dir / "study.toml", text)
    code, said = run_cli(["run", study, "--only", "analyze"], capsys)
    assert code == 0, said
    res = study_dir / "res"
    assert "negnll" in json.loads((res / "summary.json").read_text())["budget"]
    pd.testing.assert_frame_equal(_choices(res, "negnll"), _choices(res, "nll"))
