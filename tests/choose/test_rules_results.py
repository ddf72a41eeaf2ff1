"""The rule registry (one entry per rule) and the results helpers (Estimate, fmt)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ckptsel.choose import core, rules
from ckptsel.choose.choices import choose_trajectory
from ckptsel.choose.settings import ChoiceSettings
from ckptsel.results.estimate import Estimate, fmt
from ckptsel.workflows.advise.selection import SelectSettings, select_checkpoint

import recordsgen as rg
from recordsgen import val


def test_rule_order_and_roles():
    assert rules.RULE_ORDER == ("accuracy", "agreement", "nll", "last")
    assert rules.SIGNAL_RULES == ("accuracy", "agreement", "nll")
    assert tuple(rules.MATCHED_HALF_RULES) == ("oracle", "agreement")
    assert [r.maximize for r in rules.RULES.values() if r.chooses] == [True, True, False]
    assert [r.uses_labels for r in rules.RULES.values()] == [True, False, False, False]


def test_signals_and_missing_nll():
    correct = np.array([[1, 0, 1], [0, 0, 1]], dtype=bool)
    answers = np.array([[1, 2, 3], [1, 4, 5]])
    v = val(correct, answers=answers, nll=[[1.0, 2.0, 3.0], [0.5, 0.5, 0.5]])
    np.testing.assert_array_equal(rules.accuracy_signal(v), [[1, 0, 1], [0, 0, 1]])
    # plurality per item: 1 (both), 2 (first seen), 3 (first seen)
    np.testing.assert_array_equal(rules.agreement_signal(v), [[1, 1, 1], [1, 0, 0]])
    np.testing.assert_array_equal(rules.nll_signal(v), [[1.0, 2.0, 3.0], [0.5, 0.5, 0.5]])
    v.nll.clear()
    assert rules.nll_signal(v) is None


def _worst(v):
    """A test-only rule: fewest correct answers (minimize correctness)."""
    return v.correct.astype(np.int64)


def test_adding_a_rule_is_one_registry_entry(monkeypatch):
    spec = rules.RuleSpec("worst", _worst, maximize=False, uses_labels=True)
    monkeypatch.setitem(rules.RULES, "worst", spec)
    rng = np.random.default_rng(3)
    correct = rng.random((5, 80)) < np.linspace(0.3, 0.7, 5)[:, None]
    v = val(correct, answers=rng.integers(0, 3, (5, 80)))
    picked = choose_trajectory(v, ChoiceSettings(permutations=7, seed=2))
    totals = correct.sum(axis=1)
    expected = (totals == totals.min()) / (totals == totals.min()).sum()
    np.testing.assert_array_equal(picked[("nested", "worst", "full")], expected)
    # every scheme carries it: budgets, one variant per group, thinning
    assert {k[0] for k in picked if k[1] == "worst"} == {"nested", "one_variant", "thin2", "thin3", "thin4"}
    # budget 32 = the nested subsets of the engine, minimized
    orders = core.permutations(core.string_keys(list(v.item_ids)), 2, 7)
    sums = core.prefix_sums(correct.astype(np.int64), orders, [32])
    np.testing.assert_allclose(picked[("nested", "worst", "32")], core.tie_probabilities(sums, maximize=False).mean(axis=1)[:, 0])


def test_select_offers_the_registered_rules(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    trajs = rg.random_study(rng, n_configs=1, seeds=1, T=(3, 4), n_val=(40, 41), n_test=(20, 21))
    rec = rg.write(tmp_path / "rec", *rg.tables(trajs))
    name = trajs[0].name
    settings = SelectSettings(partitions=5, draws=20, bootstrap_partitions=2, permutations=5)
    monkeypatch.setitem(rules.RULES, "worst", rules.RuleSpec("worst", _worst, False, True))
    monkeypatch.setattr("ckptsel.workflows.advise.selection.SIGNAL_RULES", (*rules.SIGNAL_RULES, "worst"))
    out = select_checkpoint(rec, name, rule="worst", settings=settings)
    assert list(out.rules) == ["accuracy", "agreement", "nll", "worst"]
    assert out.recommendation.rule == "worst"


def test_estimate_rounds_and_flags_like_summary_json():
    e = Estimate(1.23456789, -0.5, 2.0)
    assert e.unresolved
    assert e.to_dict() == {"mean": 1.234568, "lo": -0.5, "hi": 2.0, "unresolved": True}
    # unresolved is decided on the unrounded bounds
    d = Estimate(-1e-9, 1e-9, 2.0).to_dict()
    assert d == {"mean": 0.0, "lo": 0.0, "hi": 2.0, "unresolved": False}
    assert math.copysign(1.0, Estimate(-0.0, -1.0, 1.0).to_dict()["mean"]) == 1.0  # exact -0.0 -> 0.0
    assert Estimate(float("nan"), float("nan"), 1.0).to_dict() == {"mean": None, "lo": None, "hi": 1.0, "unresolved": True}
    assert Estimate(np.float64(-3.0), np.float64(-4.0), np.float64(-2.0)).to_dict()["unresolved"] is False
    assert Estimate.from_dict({"mean": 0.5, "lo": 0.1, "hi": 0.9, "unresolved": False}) == Estimate(0.5, 0.1, 0.9)
    assert Estimate.from_dict(None) is None
    assert Estimate.from_dict({"mean": None, "lo": None, "hi": None, "unresolved": True}) is None


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({}, "+1.00 [-0.50, +2.25] unresolved"),
        ({"mean": False}, "[-0.50, +2.25] unresolved"),
        ({"unit": " pp", "mark": False}, "+1.00 pp [-0.50, +2.25]"),
    ],
)
def test_fmt(kwargs, text):
    d = {"mean": 1.0, "lo": -0.5, "hi": 2.25, "unresolved": True}
    assert fmt(d, **kwargs) == text
    assert fmt(Estimate(1.0, -0.5, 2.25), **kwargs) == text
    assert fmt(None, **kwargs) == "–"
    assert fmt({"mean": None}, **kwargs) == "–"
    assert fmt({"mean": -1.0, "lo": -2.0, "hi": -0.004, "unresolved": False}) == "-1.00 [-2.00, -0.00]"
