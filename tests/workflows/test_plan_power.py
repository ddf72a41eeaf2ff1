"""``ckptsel plan`` says how much power its safe plan leaves on the table (issue 44 item 8).

Next to the safe budget (the promise, a lower confidence bound, reaches the target) it names the
smallest budget whose point estimate reaches the target (labelled not guaranteed) and what the
safe plan costs beside it; the lower bounds of the promise are one-sided. Plans are run through
the CLI as a user runs them.
"""

from __future__ import annotations

import json
from statistics import NormalDist

import numpy as np
import pytest

from ckptsel.workflows.advise.planning import MIN_PROMISE_CLUSTERS, PilotMoments, calibrated_curves

import recordsgen as rg
from clirun import run_cli

POWER_KEYS = ["extra_items", "p_beat_point_at_smallest", "promise_at_smallest", "p_beat_point_at_safe", "promise_at_safe", "note"]


def _pilot(p, n, seed):
    """(T, n) correctness of ``n`` items in pairs (bench_plan's generator, loading 0.85)."""
    rng = np.random.default_rng(seed)
    g = rng.standard_normal((1, n // 2)).repeat(2, axis=1)
    u = np.sqrt(0.5) * g + np.sqrt(0.5) * rng.standard_normal((1, n))
    z = 0.85 * u + np.sqrt(1 - 0.85**2) * rng.standard_normal((len(p), n))
    return z < np.array([NormalDist().inv_cdf(x) for x in p])[:, None]


def _records(tmp_path, val, name="records"):
    T, n = val.shape
    traj = rg.Traj(
        name="run",
        configuration="cfg",
        task="gsm8k",
        steps=[10 * (i + 1) for i in range(T)],
        val_correct=val,
        val_answers=np.where(val, "A", "B"),
        val_nll=np.ones(val.shape),
        val_tokens=np.full(n, 3),
        test_correct=val[:, :1],
        test_answers=np.where(val[:, :1], "A", "B"),
        val_groups=[f"q{i // 2}" for i in range(n)],
    )
    return rg.write(tmp_path / name, *rg.tables([traj]))


def _plan(records, capsys, *extra):
    code, said = run_cli(["plan", records, "--draws", "500", "--json", *extra], capsys)
    assert code == 0, said
    return json.loads(said)["pilot"]


def _first(rows, key, target=0.8):
    return next((r["budget"] for r in rows if r[key] >= target), None)


def _consistent(out):
    """The new fields agree with each other and with the rows."""
    left, rows = out["power_left"], out["rows"]
    assert list(left) == POWER_KEYS and left["note"]
    assert out["safe_budget"] == out["planned_budget"] == _first(rows, "p_beat")
    small, safe = out["smallest_budget"], out["safe_budget"]
    point = _first(rows, "p_beat_point")
    assert small == (point if safe is None else min(x for x in (point, safe) if x is not None))
    if small is not None and safe is not None:
        assert small <= safe and left["extra_items"] == safe - small
    else:
        assert left["extra_items"] is None
    at = {r["budget"]: r for r in rows}
    for b, name in ((small, "smallest"), (safe, "safe")):
        want = None if b is None else (at[b]["p_beat_point"], at[b]["p_beat"])
        assert (left[f"p_beat_point_at_{name}"], left[f"promise_at_{name}"]) == (want or (None, None))
    return left


def test_clear_peak_names_the_smallest_budget_and_what_the_safe_one_costs(tmp_path, capsys):
    records = _records(tmp_path, _pilot([0.40, 0.50, 0.60, 0.56, 0.52], 512, seed=0))
    out = _plan(records, capsys)
    left = _consistent(out)
    small, safe = out["smallest_budget"], out["safe_budget"]
    assert small is not None and safe is not None and small < safe
    assert left["p_beat_point_at_smallest"] >= 0.8 > left["promise_at_smallest"]
    assert left["promise_at_safe"] >= 0.8
    assert f"may be met at {small} items" in left["note"] and "not guaranteed" in left["note"]
    assert f"the safe plan asks for {safe} items, {safe - small} more" in left["note"]
    assert out["answer"].startswith(f"{safe} items")  # the recommendation is still the safe one
    code, said = run_cli(["plan", records, "--draws", "500"], capsys)
    text = " ".join(said.split())
    assert code == 0 and "smallest (estimate)" in text and "safe (promised)" in text
    assert f"not guaranteed): {small}; safe budget (promised): {safe}." in text
    assert "Power left on the table: the target may be met" in text


def test_unresolved_peak_gets_the_estimate_but_no_promise(tmp_path, capsys):
    out = _plan(_records(tmp_path, _pilot([0.45, 0.55, 0.59, 0.57, 0.55], 256, seed=0)), capsys)
    left = _consistent(out)
    assert out["safe_budget"] is None and out["smallest_budget"] is not None
    assert "no budget up to 1024 can be promised: a larger pilot would tell" in left["note"]
    assert out["answer"].startswith("no budget up to 1024 reaches")


def test_lower_bounds_are_one_sided(tmp_path, capsys):
    val = _pilot([0.40, 0.50, 0.60, 0.56, 0.52], 512, seed=0)
    traj = _plan(_records(tmp_path, val), capsys)["trajectories"]["run"]
    assert 1.645 < traj["critical_value"] < traj["critical_value_upper"]
    lo, hi = np.array(list(traj["gap_bounds_pp"].values())).T
    d = 100 * (val[:-1].mean(axis=1) - val[-1].mean())
    assert np.allclose(d - lo, (hi - d) * traj["critical_value"] / traj["critical_value_upper"], atol=1e-5)
    m = PilotMoments.of(val, val, np.repeat(np.arange(256), 2).astype(str), True)
    one = calibrated_curves(m, (16, 64, 256, 1024), 500, 0.95, seed=1)
    two = calibrated_curves(m, (16, 64, 256, 1024), 500, 0.95, seed=1, lower_sides=2)
    assert two["critical"] == two["critical_upper"] == one["critical_upper"] > one["critical"]
    assert np.all(one["p_beat"] >= two["p_beat"]) and one["p_beat"][-1] > two["p_beat"][-1]
    assert np.array_equal(one["p_beat_point"], two["p_beat_point"])


@pytest.mark.parametrize("seed", range(4))
def test_smallest_never_above_safe(tmp_path, capsys, seed):
    p = [[0.40, 0.50, 0.60, 0.56, 0.52], [0.45, 0.55, 0.59, 0.57, 0.55], [0.5, 0.6, 0.6, 0.6]][seed % 3]
    out = _plan(_records(tmp_path, _pilot(p, 256 + 128 * seed, seed)), capsys, "--rule", "agreement")
    _consistent(out)


# --------------------------------------------------------------------------- hostile pilots
def test_no_peak_gets_neither(tmp_path, capsys):
    out = _plan(_records(tmp_path, _pilot([0.30, 0.40, 0.60], 200, seed=1)), capsys)
    left = _consistent(out)
    assert out["safe_budget"] is None and out["smallest_budget"] is None
    assert left["note"].startswith("even taken as exact the pilot gives P(choice beats final) < 0.8")
    assert left["note"].endswith("keep the final checkpoint")


def test_all_checkpoints_equal(tmp_path, capsys):
    val = np.tile(np.arange(40) % 3 == 0, (4, 1))  # every checkpoint answers every item alike
    out = _plan(_records(tmp_path, val), capsys)
    _consistent(out)
    assert out["safe_budget"] is None and out["smallest_budget"] is None
    assert all(r["p_beat"] == r["p_beat_point"] == 0.0 for r in out["rows"])


def test_one_item_is_refused(tmp_path, capsys):
    val = np.array([[True], [True], [False]])  # one item: a zero variance, no evidence
    code, said = run_cli(["plan", _records(tmp_path, val), "--json"], capsys)
    assert code == 2 and "the pilot needs at least 2 clusters of items (it has 1 item(s)" in said


def test_too_few_clusters_promise_nothing(tmp_path, capsys):
    # 8 items in 4 pairs, the first checkpoint right and the final wrong on every one: a zero
    # variance that once promised P(beat) = 1 at 16 items
    val = np.array([[True] * 8, [True] * 8, [False] * 8])
    out = _plan(_records(tmp_path, val), capsys)
    left = _consistent(out)
    assert out["safe_budget"] is None and out["smallest_budget"] == 16
    assert all(r["p_beat"] == 0.0 and r["p_beat_point"] == 1.0 for r in out["rows"])
    assert f"a promise needs at least {MIN_PROMISE_CLUSTERS} clusters of pilot items; this pilot has 4" in left["note"]
    assert out["trajectories"]["run"]["confident_beaters"] == []
    assert all(lo is None for lo, _ in out["trajectories"]["run"]["gap_bounds_pp"].values())


def test_resampling_methods_report_estimates_only(tmp_path, capsys):
    out = _plan(_records(tmp_path, _pilot([0.40, 0.50, 0.60, 0.56, 0.52], 256, seed=2)), capsys, "--method", "split")
    left = out["power_left"]
    assert out["smallest_budget"] == out["safe_budget"] == out["planned_budget"]
    assert left["promise_at_smallest"] is None and left["promise_at_safe"] is None
    assert left["note"].startswith("method split: estimates only, nothing is promised")
