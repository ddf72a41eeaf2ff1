"""Hand-computed examples for the rules, ties, budgets, H, D and B."""

from __future__ import annotations

import numpy as np
import pytest

from ckptsel.choose import core
from ckptsel.choose.choices import choose_trajectory
from ckptsel.choose.evaluate import matched_half
from ckptsel.choose.settings import ChoiceSettings

import recordsgen as rg
from recordsgen import val  # noqa: E402


def test_tie_probabilities_uniform_over_exact_ties():
    scores = np.array([[3, 1], [5, 1], [5, 0]])
    np.testing.assert_array_equal(core.tie_probabilities(scores), [[0, 0.5], [0.5, 0.5], [0.5, 0]])
    np.testing.assert_array_equal(core.tie_probabilities(scores, maximize=False), [[1, 0], [0, 0], [0, 1]])


def test_plurality_tie_goes_to_answer_seen_first_in_checkpoint_order():
    # item 0: answers B A A B -> 2-2 tie, B occurs first (checkpoint 0) -> plurality B
    # item 1: answers A B C C -> C has 2 votes -> plurality C
    # item 2: empty answer "" (code 9) three times beats A once: empty is an answer like any other
    answers = np.array([[1, 0, 9], [0, 1, 9], [0, 2, 0], [1, 2, 9]])
    agree = core.plurality_agreement(answers)
    np.testing.assert_array_equal(agree, [[1, 0, 1], [0, 0, 1], [0, 1, 0], [1, 1, 1]])


def test_matched_nll_is_a_ratio_of_sums_not_a_mean_of_means():
    # item 0 has 100 tokens, item 1 has 1 token.
    # ckpt A: 100/100 and 3/1 -> ratio 103/101 = 1.02, mean of means 2.0
    # ckpt B: 150/100 and 1/1 -> ratio 151/101 = 1.50, mean of means 1.25
    # ratio of sums keeps A (a mean of per-item means would keep B).
    v = val(np.zeros((2, 2)), nll=[[100.0, 3.0], [150.0, 1.0]], tokens=[100, 1])
    picked = choose_trajectory(v, ChoiceSettings(permutations=5, seed=1))
    np.testing.assert_array_equal(picked[("nested", "nll", "full")], [1.0, 0.0])


def test_accuracy_ties_are_averaged_and_budgets_above_pool_skipped():
    # 40 items: checkpoints 0 and 1 are correct on everything, checkpoint 2 on nothing.
    correct = np.zeros((3, 40), dtype=bool)
    correct[:2] = True
    picked = choose_trajectory(val(correct), ChoiceSettings(permutations=7, seed=3))
    for budget in ("32", "full"):
        np.testing.assert_array_equal(picked[("nested", "accuracy", budget)], [0.5, 0.5, 0.0])
    assert ("nested", "accuracy", "64") not in picked  # 64 > 40 items: skipped
    np.testing.assert_array_equal(picked[("nested", "last", "full")], [0, 0, 1])


def test_budget_32_probability_is_the_fraction_of_permutations_where_a_checkpoint_wins():
    # 33 items; checkpoint 0 correct on items 0..16 (17), checkpoint 1 on items 16..32 (17).
    # At budget 32 (one item left out) checkpoint 0 wins iff the left-out item is in 17..32,
    # checkpoint 1 wins iff it is in 0..15, tie iff it is item 16 (both correct on it).
    n = 33
    correct = np.zeros((2, n), dtype=bool)
    correct[0, :17] = True
    correct[1, 16:] = True
    settings = ChoiceSettings(permutations=300, seed=11)
    picked = choose_trajectory(val(correct), settings)
    orders = core.permutations(core.string_keys([f"i{k:03d}" for k in range(n)]), settings.seed, 300)
    left_out = orders[:, 32]
    expected0 = np.mean(np.where(left_out >= 17, 1.0, np.where(left_out == 16, 0.5, 0.0)))
    assert picked[("nested", "accuracy", "32")][0] == pytest.approx(expected0, abs=1e-12)
    np.testing.assert_array_equal(picked[("nested", "accuracy", "full")], [0.5, 0.5])


def test_thinning_keeps_the_final_checkpoint_and_recomputes_pluralities():
    np.testing.assert_array_equal(core.thinned_indices(7, 2), [0, 2, 4, 6])
    np.testing.assert_array_equal(core.thinned_indices(7, 3), [0, 3, 6])
    np.testing.assert_array_equal(core.thinned_indices(5, 4), [0, 4])
    # answers on one item over 5 checkpoints: A B B C A; full-grid plurality: A/B tie -> A (first)
    # thinned k=2 keeps checkpoints 0, 2, 4: A B A -> plurality A; k=4 keeps 0, 4: A A
    answers = np.array([[0], [1], [1], [2], [0]])
    assert core.plurality_agreement(answers)[:, 0].tolist() == [True, False, False, False, True]
    answers_many = np.repeat(answers, 40, axis=1)
    picked = choose_trajectory(val(np.zeros((5, 40)), answers=answers_many), ChoiceSettings(permutations=3, seed=0))
    np.testing.assert_array_equal(picked[("thin2", "agreement", "full")], [0.5, 0, 0, 0, 0.5])
    np.testing.assert_array_equal(picked[("thin2", "last", "full")], [0, 0, 0, 0, 1])


def test_one_variant_orders_pick_one_item_per_group():
    groups = np.array([0, 0, 1, 1, 1, 2])
    keys = core.string_keys([f"i{k}" for k in range(6)])
    orders = core.one_variant_orders(keys, groups, core.string_keys(["a", "b", "c"]), seed=5, reps=50)
    assert orders.shape == (50, 3)
    assert all(sorted(groups[row].tolist()) == [0, 1, 2] for row in orders)
    assert len({tuple(r) for r in orders}) > 1  # repetitions differ


def _study_dir(tmp_path, trajs):
    gen, nll = rg.tables(trajs)
    return rg.write(tmp_path / "records", gen, nll)


def test_pipeline_G_H_D_by_hand(tmp_path):
    from ckptsel.workflows.analysis import analyze

    # One trajectory, 3 checkpoints, 64 validation items, 10 test items.
    # Validation: checkpoint 1 is right on all 64 items (accuracy picks it at every budget);
    # NLL is lowest at checkpoint 0 on every item (NLL picks checkpoint 0 at every budget).
    # Test accuracies: 20%, 60%, 40% (final) -> G_acc = 60-40 = +20, G_nll = 20-40 = -20,
    # H_acc = +40, D_acc = 0, G_last = 0, H_last = +20.
    n, N = 64, 10
    vc = np.zeros((3, n), dtype=bool)
    vc[1] = True
    nll = np.stack([np.full(n, 1.0), np.full(n, 2.0), np.full(n, 3.0)])
    tc = np.zeros((3, N), dtype=bool)
    tc[0, :2] = True
    tc[1, :6] = True
    tc[2, :4] = True
    traj = rg.Traj("t1", "c1", "x", [25, 50, 60], vc, np.where(vc, "1", "2"), nll, np.full(n, 4), tc, np.where(tc, "1", "2"))
    s = analyze(_study_dir(tmp_path, [traj]), tmp_path / "out", permutations=20, draws=100)
    assert s.gains.get("G", "accuracy", "full").mean == pytest.approx(20.0)
    assert s.gains.get("G", "accuracy", "32").mean == pytest.approx(20.0)
    assert s.gains.get("G", "nll", "full").mean == pytest.approx(-20.0)
    assert s.gains.get("H", "accuracy", "full").mean == pytest.approx(40.0)
    assert s.gains.get("H", "last", "full").mean == pytest.approx(20.0)
    assert s.D["accuracy"].mean == pytest.approx(0.0)
    assert s.gains.get("G", "last", "64").mean == pytest.approx(0.0)
    # one configuration: the configuration bootstrap is degenerate, and the summary says so;
    # checkpoints 25 and 60 answer "2" to every validation item, wrong on all: degenerate (issue 48)
    assert len(s.warnings) == 2 and "only 1 configuration(s)" in s.warnings[0]
    assert "degenerate" in s.warnings[1] and "none is recommended" in s.warnings[1]


def test_matched_half_by_hand():
    # Two checkpoints, two test items: checkpoint 0 right on item 0 only, final right on item 1.
    # Whatever the partition, selecting on the half holding item 0 keeps checkpoint 0:
    # in-half gain +100 pp, out-of-half -100 pp; selecting on the other half keeps the final
    # (0, 0). Averaged over directions: G_in = +50, G_out = -50, B = +100.
    correct = np.array([[1, 0], [0, 1]], dtype=bool)
    orders = core.permutations(core.string_keys(["a", "b"]), 0, 10, stream=4)
    out = matched_half(correct, core.plurality_agreement(np.array([[0, 0], [1, 1]])), orders)
    assert out["oracle"] == pytest.approx({"G_in": 50.0, "G_out": -50.0, "B": 100.0})


def test_matched_half_counts_summed_for_many_trajectories_at_once():
    """score sums the S-counts of every trajectory of a test pool in one product (half_counts):
    each trajectory's matched half is then exactly the one it gets alone."""
    from ckptsel.choose.evaluate import half_counts, selection_halves

    rng = np.random.default_rng(5)
    orders = core.permutations(core.string_keys([str(i) for i in range(37)]), 2, 9, stream=4)
    in_s = selection_halves(orders)
    trajectories = [(rng.random((T, 37)) < 0.6, rng.integers(0, 3, (T, 37))) for T in (3, 5, 2)]
    rows = [np.concatenate([c, core.plurality_agreement(a)]) for c, a in trajectories]
    for (c, a), on_s in zip(trajectories, half_counts(rows, in_s), strict=True):
        agree = core.plurality_agreement(a)
        assert matched_half(c, agree, None, on_s=on_s) == matched_half(c, agree, orders)


def test_nested_subsets_match_direct_sums():
    rng = np.random.default_rng(3)
    sig_i = rng.integers(0, 2, (4, 50))
    sig_f = rng.random((4, 50))
    sig_f[2] = sig_f[1]  # identical checkpoints must give identical sums
    orders = core.permutations(core.string_keys([str(i) for i in range(50)]), 9, 6)
    for sig in (sig_i, sig_f):
        got = core.prefix_sums(sig, orders, [5, 32, 50])
        for p in range(6):
            for b, n in enumerate([5, 32, 50]):
                np.testing.assert_allclose(got[:, p, b], sig[:, orders[p, :n]].sum(axis=1), rtol=1e-12)
    got = core.prefix_sums(sig_f, orders, [5, 32])
    np.testing.assert_array_equal(got[1], got[2])
