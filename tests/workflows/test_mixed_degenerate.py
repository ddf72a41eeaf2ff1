"""Issue 48 (items 1, 3, 10, 11, 12): records where some trajectories have NLL and others not
(an ingested harness beside a measured run) work in select, compare and analyze, the skip said
once; a checkpoint that gives one answer to most items is flagged and never recommended
silently; the answer rule says when an answer came only from its fallback; the provenance
warning names what differs; a 0/64 winner reads 0. Everything through the command line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ckptsel.data.answers.rules import FAMILY_RULES, AnswerRule
from ckptsel.records.provenance import canonical, unit_provenance
from ckptsel.records.store import upsert_records, write_records

import recordsgen as rg
from clirun import run_cli

QUICK = ["--partitions", "20", "--draws", "100", "--bootstrap-partitions", "4"]
WITHOUT_NLL = ["c1-s0", "c1-s1", "c3-s0"]


def _mixed_tables():
    trajs = rg.random_study(np.random.default_rng(11), n_configs=4, seeds=2, n_answers=8, n_val=(40, 60), n_test=(20, 30))
    return trajs, *rg.tables(trajs)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """A measured study (NLL for every trajectory) with three trajectories' NLL rows gone: what
    ``ingest`` beside ``measure`` writes."""
    _, gen, nll = _mixed_tables()
    return rg.write(tmp_path_factory.mktemp("mixed") / "records", gen, nll[~nll.trajectory.isin(WITHOUT_NLL)])


@pytest.fixture(scope="module")
def alone(tmp_path_factory):
    """Trajectory c0-s0 of the same study, alone in its records."""
    _, gen, nll = _mixed_tables()
    return rg.write(tmp_path_factory.mktemp("alone") / "records", gen[gen.trajectory == "c0-s0"], nll[nll.trajectory == "c0-s0"])


def _degenerate_traj(n: int = 128, N: int = 64) -> rg.Traj:
    """Step 20 answers "6" to every item (the gold of every fifth item is 6): its validation
    accuracy (20%) beats the others' (about 3%) by the fallback of a constant answer alone."""
    rng = np.random.default_rng(1)
    gold_v = np.array(["6" if i % 5 == 0 else str(100 + i) for i in range(n)])
    gold_t = np.array(["6" if i % 5 == 0 else str(300 + i) for i in range(N)])

    def ckpt(gold, acc):
        return np.where(rng.random(len(gold)) < acc, gold, np.char.add("x", np.arange(len(gold)).astype(str)))

    va = np.stack([ckpt(gold_v, 0.03), np.full(n, "6"), ckpt(gold_v, 0.04), ckpt(gold_v, 0.03)])
    ta = np.stack([ckpt(gold_t, 0.03), np.full(N, "6"), ckpt(gold_t, 0.04), ckpt(gold_t, 0.03)])
    return rg.Traj("run", "c", "gsm8k", [10, 20, 30, 40], va == gold_v, va, np.ones((4, n)), np.full(n, 3), ta == gold_t, ta)


@pytest.fixture(scope="module")
def degenerate(tmp_path_factory):
    return rg.write(tmp_path_factory.mktemp("degenerate") / "records", *rg.tables([_degenerate_traj()]))


def _json(args, capsys):
    code, text = run_cli([*args, "--json"], capsys)
    assert code == 0, text
    return json.loads(text[text.index("{") :])


def _refused(args, capsys, *names: str, out: Path | None = None) -> str:
    code, text = run_cli(args, capsys)
    # the message is one line (analyze's progress and note lines before it are no message)
    lines = [line for line in text.strip().splitlines() if line.strip() and not line.startswith(("analyze: ", "note: "))]
    assert code == 2, text
    assert len(lines) == 1 and "Traceback" not in text, text
    for name in names:
        assert name in lines[0], lines[0]
    if out is not None:
        assert not out.exists() or not any(out.iterdir())
    return lines[0]


# --------------------------------------------------------------------------- 1: mixed NLL
def test_select_of_a_trajectory_without_nll_answers_and_says_the_nll_rule_skips_it(mixed, capsys):
    code, text = run_cli(["select", mixed, "--trajectory", "c1-s0", *QUICK], capsys)
    assert code == 0, text
    flat = " ".join(text.split())
    assert "trajectory 'c1-s0' has no validation NLL records" in flat and "the nll rule is skipped" in flat
    sel = _json(["select", mixed, "--trajectory", "c1-s0", *QUICK], capsys)
    assert set(sel["rules"]) == {"accuracy", "agreement"} and len(sel["notes"]) == 1


def test_select_of_a_measured_trajectory_does_not_depend_on_the_others(mixed, alone, capsys):
    beside = _json(["select", mixed, "--trajectory", "c0-s0", *QUICK], capsys)
    by_itself = _json(["select", alone, "--trajectory", "c0-s0", *QUICK], capsys)
    assert "nll" in beside["rules"] and beside["notes"] == []
    assert beside == by_itself


def test_select_all_says_the_skip_once_naming_the_trajectories(mixed, capsys):
    code, text = run_cli(["select", mixed, "--all", *QUICK], capsys)
    assert code == 0, text
    flat = " ".join(text.split())
    assert flat.count("without validation NLL records") == 1
    assert all(repr(t) in flat for t in WITHOUT_NLL)
    every = _json(["select", mixed, "--all", *QUICK], capsys)
    assert len(every["trajectories"]) == 8 and all(r["gain"] is not None for r in every["trajectories"])


def test_compare_on_a_trajectory_without_nll(mixed, capsys):
    code, text = run_cli(["compare", mixed, "25", "50", "--trajectory", "c1-s0", "--trajectory-b", "c3-s1"], capsys)
    assert code == 0, text
    pair = _json(["compare", mixed, "25", "50", "--trajectory", "c1-s0"], capsys)
    assert pair["splits"]["validation"]["answers"]["a"]["degenerate"] is False


def test_analyze_runs_the_nll_free_parts_and_says_the_skip(mixed, tmp_path, capsys):
    out = tmp_path / "results"
    code, text = run_cli(["analyze", mixed, "--out", out, "--permutations", "8", "--draws", "200"], capsys)
    assert code == 0, text
    summary = json.loads((out / "summary.json").read_text())
    said = [w for w in summary["warnings"] if "without validation NLL records" in w]
    assert len(said) == 1 and all(repr(t) in said[0] for t in WITHOUT_NLL)
    assert summary["budget"]["nll"]["full"]["G"] is not None  # from the five trajectories with NLL
    assert summary["population"]["nll_records"] is True
    flat = " ".join(text.split())
    assert "without validation NLL records" in flat
    assert "without validation NLL records" in (out / "report.html").read_text()
    code, text = run_cli(["verify", out], capsys)
    assert code == 0, text


# --------------------------------------------------------------------------- 3: degenerate
def test_select_never_recommends_a_degenerate_checkpoint_silently(degenerate, capsys):
    code, text = run_cli(["select", degenerate, "--trajectory", "run", *QUICK], capsys)
    assert code == 0, text
    flat = " ".join(text.split())
    assert "recommendation: keep the final checkpoint (step 40)" in flat
    assert "step 20 gives one answer to 100% of its 128 eligible validation items" in flat
    sel = _json(["select", degenerate, "--trajectory", "run", *QUICK], capsys)
    assert sel["rules"]["accuracy"]["choice"]["steps"] == [20]
    assert sel["recommendation"]["keep_final"] is True and "degenerate" in sel["recommendation"]["reason"]
    check = sel["answer_check"]
    assert check["flagged"] == [20] and check["most_common_share"]["20"] == 1.0
    assert check["most_common_right"]["20"] == 26 / 128  # the items whose gold is 6


def test_allow_degenerate_keeps_it_and_says_it_is_flagged(degenerate, capsys):
    sel = _json(["select", degenerate, "--trajectory", "run", "--allow-degenerate", *QUICK], capsys)
    rec = sel["recommendation"]
    assert rec["keep_step"] == 20 and rec["keep_final"] is False and "FLAGGED as degenerate" in rec["reason"]


def test_a_stricter_share_setting_still_flags_and_a_share_of_one_too(degenerate, capsys):
    for share in ("0.9", "1"):
        sel = _json(["select", degenerate, "--trajectory", "run", "--degenerate-share", share, *QUICK], capsys)
        assert sel["answer_check"]["flagged"] == [20] and sel["recommendation"]["keep_final"] is True


def test_select_all_and_compare_flag_the_degenerate_checkpoint(degenerate, capsys):
    every = _json(["select", degenerate, "--all", *QUICK], capsys)
    (row,) = every["trajectories"]
    assert row["keep_final"] is True and "degenerate" in row["reason"]
    assert any("'run' step 20 gives one answer" in line for line in every["notes"])
    code, text = run_cli(["compare", degenerate, "20", "40", "--trajectory", "run"], capsys)
    assert code == 0, text
    flat = " ".join(text.split())
    assert "validation: A = run@20 is degenerate" in flat and "test: A = run@20 is degenerate" in flat
    pair = _json(["compare", degenerate, "20", "40", "--trajectory", "run"], capsys)
    for split in ("validation", "test"):
        answers = pair["splits"][split]["answers"]
        assert answers["a"]["degenerate"] is True and answers["b"]["degenerate"] is False


def test_analyze_flags_it_in_summary_terminal_and_report_and_keeps_the_final(degenerate, tmp_path, capsys):
    out = tmp_path / "results"
    code, text = run_cli(["analyze", degenerate, "--out", out, "--permutations", "8", "--draws", "200"], capsys)
    assert code == 0, text
    summary = json.loads((out / "summary.json").read_text())
    said = [w for w in summary["warnings"] if "degenerate checkpoint" in w]
    assert len(said) == 1 and "'run' step 20 gives one answer to 100%" in said[0]
    (row,) = summary["keep"]["trajectories"]
    assert row["keep_final"] is True and "degenerate" in row["reason"]
    assert "degenerate checkpoint" in " ".join(text.split())
    assert "step 20 gives one answer to 100%" in (out / "report.html").read_text()


def test_a_checkpoint_of_a_closed_label_task_right_on_its_common_label_is_not_flagged(tmp_path, capsys):
    # true/false: a good checkpoint says "true" to 70% of the items and is right on most of them
    rng = np.random.default_rng(3)
    n = 60
    gold = np.where(rng.random(n) < 0.65, "true", "false")
    good = np.where(rng.random((3, n)) < 0.85, gold, np.where(gold == "true", "false", "true"))
    t = rg.Traj("boolq", "c", "boolq", [1, 2, 3], good == gold, good, np.ones((3, n)), np.full(n, 2), good == gold, good)
    rec = rg.write(tmp_path / "records", *rg.tables([t]))
    sel = _json(["select", rec, "--trajectory", "boolq", *QUICK], capsys)
    assert sel["answer_check"]["flagged"] == []
    assert min(sel["answer_check"]["most_common_share"].values()) >= 0.5


# --------------------------------------------------------------------------- 10: the fallback
def test_the_gsm8k_rule_says_when_only_its_fallback_found_the_answer():
    rule = FAMILY_RULES["gsm8k"]
    assert rule.fallback_used("so she has 6 apples left") is True
    assert rule.fallback_used("6 + 2 = 8. The answer is 8") is False
    assert rule.fallback_used("#### 8") is False
    assert rule.fallback_used("no number here") is False  # no answer: nothing to fall back to
    assert FAMILY_RULES["math"].fallback_used("the result is 3") is False
    assert FAMILY_RULES["commonsense"].fallback_used("true") is False
    assert AnswerRule(extract=r"(\d+)").fallback_used("12") is False


# --------------------------------------------------------------------------- 11: provenance
def test_analyze_warning_names_only_what_differs(tmp_path, capsys):
    trajs, gen, nll = _mixed_tables()
    rec = tmp_path / "records"
    base = {"engine": "hf", "version": "5.0", "dtype": "float32", "attention": "sdpa", "batch_size": 16, "device": "cpu"}
    for i, t in enumerate(sorted(gen.trajectory.unique())):
        p = canonical({**base, "prompt_format": "chat-template" if i % 2 else "alpaca"})
        prov = unit_provenance([p])
        upsert_records(rec, gen[gen.trajectory == t], nll[nll.trajectory == t], provenance={"generations": prov, "nll": prov})
    code, text = run_cli(["analyze", rec, "--out", tmp_path / "res", "--permutations", "8", "--draws", "200", "--no-report"], capsys)
    assert code == 0, text
    flat = " ".join(text.split())
    assert "different provenances (they differ in prompt format)" in flat
    assert "engine, dtype, attention, batch size or device" not in flat


# --------------------------------------------------------------------------- 12: 0 of 64
def test_a_winner_right_on_no_item_reads_zero(tmp_path, capsys):
    rec = rg.one_trajectory(tmp_path, "zero", np.zeros((4, 64), bool))
    sel = _json(["select", rec, "--trajectory", "zero", *QUICK], capsys)
    est = sel["chosen_estimate"]
    assert est["mean"] == 0.0 and est["lo"] == 0.0 and 0.0 < est["hi"] < 10.0
    assert est["mean"] <= est["naive"]["mean"]


# --------------------------------------------------------------------------- hostile cases
def _gen_with(tmp_path: Path, change) -> Path:
    _, gen, nll = _mixed_tables()
    gen = change(gen.copy())
    d = tmp_path / "records"
    d.mkdir()
    write_records(d / "generations.parquet", gen)
    write_records(d / "nll.parquet", nll)
    return d


def _null_answer(gen):
    gen["answer"] = gen["answer"].astype(object)
    gen.loc[7, "answer"] = None
    return gen


def _int_answer(gen):
    return gen.assign(answer=np.arange(len(gen), dtype=np.int64))


HOSTILE = {"NaN answer": (_null_answer, ("answer", "missing/NaN")), "answer of the wrong type": (_int_answer, ("answer", "int64"))}


@pytest.mark.parametrize("case", list(HOSTILE))
@pytest.mark.parametrize("command", ["select", "compare", "analyze"])
def test_bad_answer_columns_are_one_line(case, command, tmp_path, capsys):
    change, names = HOSTILE[case]
    rec = _gen_with(tmp_path, change)
    out = tmp_path / "out"
    args = {
        "select": ["select", rec, "--trajectory", "c0-s0", *QUICK],
        "compare": ["compare", rec, "25", "50", "--trajectory", "c0-s0"],
        "analyze": ["analyze", rec, "--out", out, "--permutations", "8", "--draws", "200"],
    }[command]
    _refused(args, capsys, *names, out=out)


@pytest.mark.parametrize("share", ["0", "-0.5", "1.5", "nan", "inf", "1e308"])
def test_a_bad_degenerate_share_is_one_line(degenerate, share, capsys):
    _refused(["select", degenerate, "--trajectory", "run", "--degenerate-share", share, *QUICK], capsys, "--degenerate-share", "(0, 1]")


def test_rule_nll_on_a_trajectory_without_nll_is_one_line_naming_it(mixed, capsys):
    _refused(["select", mixed, "--trajectory", "c3-s0", "--rule", "nll", *QUICK], capsys, "'c3-s0'", "NLL")


def test_an_all_empty_answer_column_answers_and_flags_nothing(tmp_path, capsys):
    # one answer ("") over the whole grid (K = 1): the records cannot tell one checkpoint's
    # collapse from the others', so nothing is flagged (2/K = 2 is out of reach)
    t = _degenerate_traj()
    t.val_answers = np.full(t.val_answers.shape, "")
    t.test_answers = np.full(t.test_answers.shape, "")
    rec = rg.write(tmp_path / "records", *rg.tables([t]))
    sel = _json(["select", rec, "--trajectory", "run", *QUICK], capsys)
    assert sel["answer_check"]["flagged"] == [] and set(sel["answer_check"]["most_common_share"].values()) == {1.0}
    pair = _json(["compare", rec, "20", "40", "--trajectory", "run"], capsys)
    assert pair["splits"]["validation"]["answers"]["a"]["degenerate"] is False


def test_a_degenerate_final_checkpoint_is_said_in_the_recommendation(tmp_path, capsys):
    t = _degenerate_traj()
    for name in ("val_answers", "test_answers", "val_correct", "test_correct"):  # step 20 becomes the last
        a = getattr(t, name)
        setattr(t, name, a[[0, 2, 3, 1]])
    rec = rg.write(tmp_path / "records", *rg.tables([t]))
    sel = _json(["select", rec, "--trajectory", "run", *QUICK], capsys)
    assert sel["answer_check"]["flagged"] == [40] and sel["recommendation"]["keep_final"] is True
    assert "the final checkpoint is flagged as degenerate" in sel["recommendation"]["reason"]


def test_few_items_are_never_flagged(tmp_path, capsys):
    # one answer to all of 9 items: below the 10 items a flag needs
    val = np.zeros((3, 9), bool)
    val[1, :4] = True
    rec = rg.one_trajectory(tmp_path, "few", val)  # answers "A"/"B": step 25 says "B" to all
    sel = _json(["select", rec, "--trajectory", "few", *QUICK], capsys)
    assert sel["answer_check"]["flagged"] == [] and sel["answer_check"]["items"] == 9


def test_a_single_item_is_one_line(tmp_path, capsys):
    rec = rg.one_trajectory(tmp_path, "one", np.array([[True], [False]]))
    _refused(["select", rec, "--trajectory", "one", *QUICK], capsys, "'one'", "1 eligible validation item")


# --------------------------------------------------------------------------- 10: fallback share
def _fallback_records(root: Path) -> Path:
    """gsm8k texts: step 20 states no marker ("... so 14"), so its answers are the gsm8k rule's
    last-number fallback; it is right on 30% of the items, the others (with "The answer is")
    on about 8%. Answers and correctness come from the texts through the built-in rule."""
    rule = FAMILY_RULES["gsm8k"]
    rng = np.random.default_rng(5)
    steps, rows = [10, 20, 30, 40], []
    for split, n in (("validation", 120), ("test", 80)):
        gold = (np.arange(n) * 7 + 11).astype(str)
        for step in steps:
            acc = 0.3 if step == 20 else 0.08
            right = rng.random(n) < acc
            said = np.where(right, gold, (np.arange(n) * 13 + 5000).astype(str))
            texts = [f"we add them up, so {a}" if step == 20 else f"Adding up. The answer is {a}" for a in said]
            for i, text in enumerate(texts):
                answer = rule.answer(text)
                rows.append(
                    {
                        "trajectory": "gsm",
                        "configuration": "c",
                        "task": "gsm8k",
                        "step": step,
                        "split": split,
                        "item_id": f"{split[0]}{i:03d}",
                        "group": f"{split[0]}{i:03d}",
                        "subtask": "",
                        "answer": answer,
                        "correct": answer == gold[i],
                        "text": text,
                    }
                )
    gen = pd.DataFrame(rows)
    d = root / "records"
    d.mkdir()
    write_records(d / "generations.parquet", gen)
    return d


@pytest.fixture(scope="module")
def fallback(tmp_path_factory):
    return _fallback_records(tmp_path_factory.mktemp("fallback"))


def test_select_shows_the_fallback_share_and_says_a_decision_rests_on_it(fallback, capsys):
    code, text = run_cli(["select", fallback, "--trajectory", "gsm", *QUICK], capsys)
    assert code == 0, text
    flat = " ".join(text.split())
    assert "found only by the answer rule's fallback" in flat and "20: 100%" in flat and "40: 0%" in flat
    sel = _json(["select", fallback, "--trajectory", "gsm", *QUICK], capsys)
    fb = sel["fallback"]
    assert fb["fallback_right"]["20"] == 1.0 and fb["fallback_right"]["40"] == 0.0 and fb["strict_answers"] is False
    rec = sel["recommendation"]
    assert rec["keep_step"] == 20 and "the decision rests on answers only the fallback found" in rec["reason"]
    assert fb["strict_gain"]["hi"] < 0 or fb["strict_gain"]["unresolved"]
    assert 20 not in fb["strict_choice"]


def test_strict_answers_counts_fallback_answers_wrong(fallback, capsys):
    sel = _json(["select", fallback, "--trajectory", "gsm", "--strict-answers", *QUICK], capsys)
    assert sel["fallback"]["strict_answers"] is True
    assert sel["rules"]["accuracy"]["choice"]["steps"] != [20]
    assert sel["recommendation"]["keep_final"] is True


def test_compare_shows_the_fallback_share(fallback, capsys):
    pair = _json(["compare", fallback, "20", "40", "--trajectory", "gsm"], capsys)
    for split in ("validation", "test"):
        answers = pair["splits"][split]["answers"]
        assert answers["a"]["fallback_right"] == 1.0 and answers["b"]["fallback_right"] == 0.0
    code, text = run_cli(["compare", fallback, "20", "40", "--trajectory", "gsm"], capsys)
    assert "only by the answer rule's fallback" in " ".join(text.split())


def test_analyze_names_a_kept_checkpoint_resting_on_the_fallback(fallback, tmp_path, capsys):
    out = tmp_path / "results"
    code, text = run_cli(["analyze", fallback, "--out", out, "--permutations", "8", "--draws", "200"], capsys)
    assert code == 0, text
    summary = json.loads((out / "summary.json").read_text())
    said = [w for w in summary["warnings"] if "fallback" in w]
    assert len(said) == 1 and "'gsm'" in said[0] and "step 20" in said[0] and "100%" in said[0]
    assert "fallback" in (out / "report.html").read_text()
    code, text = run_cli(["verify", out], capsys)
    assert code == 0, text


def test_strict_answers_without_texts_is_one_line(degenerate, capsys):
    _refused(["select", degenerate, "--trajectory", "run", "--strict-answers", *QUICK], capsys, "--strict-answers", "'run'", "texts")


def _texts_changed(root: Path, change) -> Path:
    src = _fallback_records(root)
    gen = pd.read_parquet(src / "generations.parquet")
    gen = change(gen)
    (src / "generations.parquet").unlink()
    write_records(src / "generations.parquet", gen)
    return src


TEXT_HOSTILE = {"text of the wrong type": (lambda g: g.assign(text=np.arange(len(g), dtype=np.int64)), ("text", "int64"))}


@pytest.mark.parametrize("case", list(TEXT_HOSTILE))
@pytest.mark.parametrize("command", ["select", "compare", "analyze"])
def test_bad_texts_are_one_line(case, command, tmp_path, capsys):
    change, names = TEXT_HOSTILE[case]
    rec = _texts_changed(tmp_path, change)
    out = tmp_path / "out"
    args = {
        "select": ["select", rec, "--trajectory", "gsm", *QUICK],
        "compare": ["compare", rec, "20", "40", "--trajectory", "gsm"],
        "analyze": ["analyze", rec, "--out", out, "--permutations", "8", "--draws", "200"],
    }[command]
    _refused(args, capsys, "generations.parquet", *names, out=out)


def test_missing_and_empty_texts_count_as_no_fallback(tmp_path, capsys):
    def change(g):
        g["text"] = g["text"].astype(object)
        g.loc[g.step == 20, "text"] = None  # step 20's texts not recorded
        g.loc[(g.step == 10) & (g.index % 2 == 0), "text"] = ""
        return g

    rec = _texts_changed(tmp_path, change)
    sel = _json(["select", rec, "--trajectory", "gsm", *QUICK], capsys)
    assert sel["fallback"]["fallback_right"]["20"] == 0.0
