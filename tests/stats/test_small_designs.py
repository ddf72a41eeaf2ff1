"""Issue 38, items 8-9: tiny designs never read *resolved* where an exact test at that size cannot
reject, zero-width intervals are not estimable, boundary accuracies get exact intervals inside
[0, 100], and trackers and warnings keep what the summary says. Each failure is reproduced the
way a user meets it: ``ckptsel compare``, ``ckptsel select``, ``ckptsel analyze --interval
percentile`` and the Python ``chosen_estimate``."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from ckptsel.workflows.advise.selection import SelectSettings

import recordsgen as rg
from clirun import run_cli

_records = rg.one_trajectory  # (tmp_path, name, val, test=None, groups=None)


def _compare(rec, name, capsys, *extra):
    code, out = run_cli(["compare", rec, "50", "25", "--trajectory", name, "--json", *extra], capsys)
    assert code == 0, out
    return json.loads(out)["splits"]["validation"]


# --------------------------------------------------------------------------- compare
def test_compare_three_items_has_an_interval_and_reads_unresolved(tmp_path, capsys):
    """Was +100 [+100, +100] (resolved) beside its own McNemar p = 0.25, then not estimable (a
    bootstrap of three equal differences has no width); now Newcombe's score interval, which has
    width at every table, and unresolved by the exact test."""
    rec = _records(tmp_path, "three", [[0, 0, 0], [1, 1, 1]])
    v = _compare(rec, "three", capsys)
    assert v["mcnemar_p"] == pytest.approx(0.25)
    d = v["difference"]
    assert d["mean"] == 100.0 and 0.0 < d["lo"] < 100.0 and d["hi"] == 100.0 and d["unresolved"] is True
    assert d["cannot_resolve"] == (
        "the exact McNemar test's p = 0.25 > 0.05 (3 discordant items: an exact 95% test cannot reject with fewer than 6)"
    )


@pytest.mark.parametrize("n", [5, 6, 8, 10])
def test_compare_four_discordant_items_read_unresolved(tmp_path, capsys, n):
    """5-10 items with 4 discordant, all one way: +80 [+40, +100], +40 [+10, +70] read resolved
    where the exact test's smallest p-value is 2/16 = 0.125."""
    b = np.zeros(n, dtype=bool)
    b[4:] = True  # B right on all but the first 4; A right everywhere
    rec = _records(tmp_path, f"n{n}", [b, np.ones(n, dtype=bool)])
    v = _compare(rec, f"n{n}", capsys)
    d = v["difference"]
    assert v["mcnemar_p"] == pytest.approx(0.125) and d["mean"] == pytest.approx(400 / n)
    assert d["lo"] > 0 and d["unresolved"] is True  # the interval kept, the verdict not
    assert d["cannot_resolve"] == (
        "the exact McNemar test's p = 0.125 > 0.05 (4 discordant items: an exact 95% test cannot reject with fewer than 6)"
    )
    code, out = run_cli(["compare", rec, "50", "25", "--trajectory", f"n{n}"], capsys)
    assert code == 0 and "unresolved" in out


def test_compare_two_groups_of_zero_width_is_not_estimable(tmp_path, capsys):
    """2 groups, each with the same difference: the bootstrap has zero width."""
    a = np.array([1, 0, 1, 0], dtype=bool)
    b = np.zeros(4, dtype=bool)
    rec = _records(tmp_path, "two", [b, a], groups=["g1", "g1", "g2", "g2"])
    d = _compare(rec, "two", capsys)["difference"]
    assert d["lo"] is None and d["not_estimable"] == "no spread across the 2 clusters"


def test_compare_resolved_only_when_the_exact_test_rejects():
    """Every 2x2 table of n <= 12 independent items: a difference reads resolved only when the
    exact McNemar test rejects at 5% (and then its interval excludes 0)."""
    from ckptsel.stats.paired import mcnemar_exact
    from ckptsel.workflows.advise.comparison import CompareSettings, paired_difference

    settings = CompareSettings(draws=400)
    seen = 0
    for n in (3, 6, 9, 12):
        for only_a, only_b in itertools.product(range(n + 1), repeat=2):
            if only_a + only_b > n:
                continue
            a = np.r_[np.ones(only_a), np.zeros(only_b), np.ones(n - only_a - only_b)].astype(bool)
            b = np.r_[np.zeros(only_a), np.ones(only_b), np.ones(n - only_a - only_b)].astype(bool)
            d = paired_difference(a, b, np.arange(n).astype(str), settings)["difference"]
            if not d["unresolved"]:
                seen += 1
                assert mcnemar_exact(only_a, only_b) <= 0.05, (n, only_a, only_b, d)
    assert seen > 0  # large one-sided tables still resolve


# --------------------------------------------------------------------------- select
SIX = [[1, 1, 0, 0, 0, 0], [1, 1, 0, 1, 1, 0], [1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0]]


def test_select_on_six_items_keeps_the_final_checkpoint(tmp_path, capsys):
    """Was "keep step 75", +54 [+14, +85] pp, where the exact test (4 discordant) gives 0.125."""
    rec = _records(tmp_path, "six", SIX)
    code, out = run_cli(["select", rec, "--trajectory", "six", "--json", "--draws", "300"], capsys)
    assert code == 0, out
    sel = json.loads(out)
    sv = sel["rules"]["accuracy"]["split_validation"]
    assert sel["rules"]["accuracy"]["choice"]["steps"] == [75]
    assert sel["recommendation"]["keep_final"] and sel["recommendation"]["keep_step"] == 100
    assert sv["unresolved"] and sv["cannot_resolve"].startswith(
        "the exact McNemar test's p = 0.125 > 0.05 (4 discordant validation clusters"
    )
    assert "cannot be resolved (the exact McNemar test's p = 0.125" in sel["recommendation"]["reason"]
    # steps 25 and 100 differ from step 75 on 4 items (exact p = 0.125): the model confidence set
    # left them out, but no exact test can at this size; they stay plausibly best
    pb = sel["plausibly_best"]
    assert pb["steps"] == [25, 50, 75, 100] and pb["kept_by_exact_test"] == [25, 100]
    code, out = run_cli(["select", rec, "--trajectory", "six", "--draws", "300"], capsys)
    assert "recommendation: keep the final checkpoint" in " ".join(out.split())


def test_select_accuracies_stay_within_0_and_100(tmp_path, capsys):
    """Two checkpoints right on all six items: "corrected for having been chosen: 102.68%
    [102.68, 102.68]" before."""
    rec = _records(tmp_path, "tie", [SIX[0], SIX[2], SIX[2], SIX[3]])
    code, out = run_cli(["select", rec, "--trajectory", "tie", "--json", "--draws", "300"], capsys)
    ce = json.loads(out)["chosen_estimate"]
    assert ce["steps"] == [50, 75]
    assert 0.0 <= ce["lo"] < ce["mean"] < ce["hi"] <= 100.0
    assert ce["lo"] == pytest.approx(100 * (0.05 / 8) ** (1 / 6), abs=1e-6)  # exact, 4 checkpoints
    assert all(0.0 <= ce["naive"][k] <= 100.0 for k in ("mean", "lo", "hi"))
    code, out = run_cli(["select", rec, "--trajectory", "tie", "--draws", "300"], capsys)
    text = " ".join(out.split())
    assert "102." not in text and "exact Clopper-Pearson" in text


@pytest.mark.parametrize("n", [6, 10, 20, 60])
def test_chosen_estimate_right_on_every_item_is_exact(n):
    """Was 99.9996 [99.9994, 99.9998] (a zero variance floored at 1e-12) where the exact lower
    bound is 54-94%: now the Clopper-Pearson interval, simultaneous over the T checkpoints."""
    from ckptsel.workflows.advise.selection import best_checkpoints

    rng = np.random.default_rng(n)
    T = 5
    correct = rng.random((T, n)) < 0.6
    correct[3] = True
    _, ce = best_checkpoints(correct, np.arange(n).astype(str), np.arange(T) * 10, SelectSettings(draws=200))
    assert ce.steps == (30,)
    assert ce.lo == pytest.approx(100 * (0.05 / (2 * T)) ** (1 / n), abs=1e-6)
    assert ce.lo < 100 * (0.025 ** (1 / n)) + 1e-9  # at most the single-checkpoint exact bound
    assert ce.hi == 100.0 and ce.mean == pytest.approx(100 * 0.5 ** (1 / n), abs=1e-6)
    assert ce.exact and ce.to_dict()["method"].startswith("exact")


def test_clopper_pearson_against_binomial_sums():
    from ckptsel.stats.exact import clopper_pearson, needed_units

    assert (needed_units(0.95), needed_units(0.99), needed_units(0.9), needed_units(0.5)) == (6, 8, 5, 2)

    def cdf(k, n, p):
        return sum(math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k + 1))

    for k, n in ((0, 6), (3, 6), (6, 6), (17, 40), (59, 60)):
        lo, hi = clopper_pearson(k, n, 0.95)
        if k > 0:  # P(X >= k | lo) = 2.5%
            assert 1 - cdf(k - 1, n, lo) == pytest.approx(0.025, abs=1e-9)
        if k < n:  # P(X <= k | hi) = 2.5%
            assert cdf(k, n, hi) == pytest.approx(0.025, abs=1e-9)
    assert clopper_pearson(6, 6, 0.95) == (pytest.approx(0.025 ** (1 / 6)), 1.0)


# --------------------------------------------------------------------------- analyze
_estimates = rg.estimates_in


def test_analyze_percentile_at_two_configurations_never_reads_resolved(tmp_path, capsys):
    """K = 2: 3 distinct configuration resamples, and the sign-flip test's smallest p is 0.5."""
    study = rg.random_study(np.random.default_rng(8), n_configs=2, seeds=4, T=(4, 7), n_val=(60, 90), n_test=(40, 60), tasks=("a",))
    rec = rg.write(tmp_path / "rec", *rg.tables(study))
    out = tmp_path / "out"
    code, said = run_cli(
        ["analyze", rec, "--out", out, "--interval", "percentile", "--no-report", "--permutations", "10", "--draws", "300"], capsys
    )
    assert code == 0, said
    summary = json.loads((out / "summary.json").read_text())
    flagged = 0
    for block in ("budget", "D", "matched_half", "sensitivities", "by_task", "joint_bootstrap"):
        for path, e in _estimates(summary[block]):
            assert e["unresolved"] is True, (block, path, e)  # configuration level: never resolved
            if "cannot_resolve" in e:
                flagged += 1
                assert e["lo"] > 0 or e["hi"] < 0  # the interval excluded 0: it read resolved before
                assert e["cannot_resolve"].endswith(("exact sign-flip test's p = 0.5 > 0.05", "exact sign-flip test's p = 1 > 0.05"))
    assert flagged > 0
    from ckptsel.results.summary import Summary

    again = Summary.load(out / "summary.json")  # read back, checked, same bytes
    assert json.loads(json.dumps(again.to_dict())) == summary


def test_estimate_that_cannot_be_resolved_reads_back_and_prints():
    from ckptsel.errors import CkptselError
    from ckptsel.results.estimate import Estimate, fmt

    e = Estimate(80.0, 40.0, 100.0).cannot_be_resolved("4 discordant items, and an exact 95% test needs 6")
    d = e.to_dict()
    assert d == {
        "mean": 80.0,
        "lo": 40.0,
        "hi": 100.0,
        "unresolved": True,
        "cannot_resolve": "4 discordant items, and an exact 95% test needs 6",
    }
    assert Estimate.read(d, "x") == e and Estimate.from_dict(d).to_dict() == d
    assert fmt(e) == "+80.00 [+40.00, +100.00] unresolved: 4 discordant items, and an exact 95% test needs 6"
    assert fmt(e, mark=False) == "+80.00 [+40.00, +100.00]"
    with pytest.raises(CkptselError, match="cannot_resolve"):
        Estimate.read({**d, "unresolved": False}, "x")


# --------------------------------------------------------------------------- trackers, warnings
def test_tracker_headline_keeps_not_estimable():
    """Issue 38 item 9: the headline kept mean/lo/hi only, so a not-estimable claim read as a bare
    mean."""
    from ckptsel.trackers.base import headline_metrics

    one = {"mean": 1.78, "lo": None, "hi": None, "unresolved": True, "not_estimable": "1 configuration"}
    summary = {"budget": {"accuracy": {"full": {"G": one, "H": one}}}, "D": {"accuracy": one}}
    m = headline_metrics(summary, None)
    for name in ("G/accuracy/full", "H/accuracy/full", "D/accuracy"):
        assert m[f"ckptsel/{name}/not_estimable"] == 1.0 and f"ckptsel/{name}/lo" not in m
    sel = {"recommendation": {"rule": "accuracy", "keep_step": 4, "keep_final": True}, "rules": {"accuracy": {"split_validation": one}}}
    m = headline_metrics(None, sel)
    assert m["ckptsel/select/accuracy/split_validation/not_estimable"] == 1.0


def test_warnings_name_a_task_with_one_configuration(tmp_path, capsys):
    """The pooled warnings spoke of the study's configurations only: a task with one had no word."""
    rng = np.random.default_rng(3)
    a = rg.random_study(rng, n_configs=3, seeds=2, T=(3, 5), n_val=(40, 60), n_test=(30, 40), tasks=("a",))
    b = rg.random_study(rng, n_configs=1, seeds=2, T=(3, 5), n_val=(40, 60), n_test=(30, 40), tasks=("b",))
    for t in b:
        t.name, t.configuration = "b-" + t.name, "b-" + t.configuration
    rec = rg.write(tmp_path / "rec", *rg.tables(a + b))
    code, said = run_cli(["analyze", rec, "--out", tmp_path / "out", "--no-report", "--permutations", "8", "--draws", "200"], capsys)
    assert code == 0, said
    warnings = json.loads((tmp_path / "out" / "summary.json").read_text())["warnings"]
    assert any(w.startswith("task(s) 'b' with only 1 configuration") for w in warnings), warnings
    assert "task(s) 'b' with only 1 configuration" in " ".join(said.split())
