"""`ckptsel select`: planted better checkpoint recommended, equal checkpoints -> keep final,
hand-computed split-validation and test gains, and the vectorized gains against a plain loop."""

from __future__ import annotations

import json
from statistics import NormalDist

import numpy as np
import pytest

from ckptsel.choose import core
from ckptsel.choose.choices import choose_trajectory, full_pool_choice, pool_key
from ckptsel.choose.rules import RULES
from ckptsel.choose.settings import FULL, ChoiceSettings
from ckptsel.cli.app import main
from ckptsel.errors import CkptselError, VerificationError
from ckptsel.results.estimate import Estimate
from ckptsel.workflows.advise.selection import (
    SelectSettings,
    partition_masks,
    pooled_split_gains,
    select_checkpoint,
    split_validation_gains,
)

import recordsgen as rg
from clirun import run_cli

STEPS = [10, 20, 30, 40, 50]
FAST = SelectSettings(partitions=60, draws=300, bootstrap_partitions=10, permutations=30)


def planted(name: str = "run-s42", n: int = 200, N: int = 100) -> rg.Traj:
    """Checkpoint at step 30 answers every item correctly; every other checkpoint (the final one
    included) is identical and correct exactly on the even-numbered items. Wrong answers agree
    with each other, so the label-free plurality is the wrong answer on odd items.

    Known answers: accuracy picks step 30 at every budget; on any half/half split with equal
    halves the out-of-half gain is 100 − 100·(even share of the other half), and the two
    directions average to exactly 50 pp. On test, step 30 is always right and the final
    checkpoint right on the first 60 % -> +40 pp.
    """
    T = len(STEPS)
    even = (np.arange(n) % 2) == 0
    val_correct = np.tile(even, (T, 1))
    val_correct[2] = True
    val_answers = np.where(val_correct, "A", "B")
    nll = np.full((T, n), 1.0)
    nll[1] = 0.5  # matched NLL prefers step 20, which is identical to the final checkpoint in accuracy
    test_correct = np.tile(np.arange(N) < 0.6 * N, (T, 1))
    test_correct[2] = True
    return rg.Traj(
        name=name,
        configuration="cfg",
        task="gsm8k",
        steps=STEPS,
        val_correct=val_correct,
        val_answers=val_answers,
        val_nll=nll,
        val_tokens=np.full(n, 4),
        test_correct=test_correct,
        test_answers=np.where(test_correct, "A", "B"),
    )


def equal(name: str = "flat-s42", n: int = 120, N: int = 50, noisy: bool = False, seed: int = 3) -> rg.Traj:
    """All checkpoints exactly equal (or, with ``noisy``, equal in truth: independent coin flips)."""
    rng = np.random.default_rng(seed)
    T = len(STEPS)
    if noisy:
        val_correct = rng.random((T, n)) < 0.5
        nll = rng.gamma(2.0, 1.0, (T, n))
    else:
        val_correct = np.tile(rng.random(n) < 0.5, (T, 1))
        nll = np.tile(rng.gamma(2.0, 1.0, n), (T, 1))
    test_correct = rng.random((T, N)) < 0.5
    return rg.Traj(
        name=name,
        configuration="flat",
        task="math",
        steps=STEPS,
        val_correct=val_correct,
        val_answers=np.where(val_correct, "A", "B"),
        val_nll=nll,
        val_tokens=np.full(n, 3),
        test_correct=test_correct,
        test_answers=np.where(test_correct, "A", "B"),
    )


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    root = tmp_path_factory.mktemp("select")
    gen, nll = rg.tables([planted(), equal(), equal("noisy-s42", noisy=True)])
    return rg.write(root / "records", gen, nll)


def test_planted_better_checkpoint_is_recommended(records):
    out = select_checkpoint(records, "run-s42", settings=FAST)  # a typed Selection
    acc = out.rules["accuracy"]
    assert acc.choice == {"steps": [30], "probabilities": {"30": 1.0}}
    assert [c.budget for c in acc.budget_curve] == ["32", "64", "128", "full"]
    assert all(c.most_likely_step == 30 for c in acc.budget_curve)
    assert acc.budget_curve[-1].probability == 1.0
    sv = acc.split_validation.estimate
    assert isinstance(sv, Estimate)
    assert sv.mean == pytest.approx(50.0, abs=1e-9)  # hand-computed: see planted()
    assert acc.split_validation.to_dict()["half_sizes"] == [100, 100]
    assert 30 < sv.lo < 50 < sv.hi < 70 and not sv.unresolved
    test = acc.test
    assert test.estimate.mean == pytest.approx(40.0) and test.items == 100
    assert (test.chosen_accuracy, test.final_accuracy) == (100.0, 60.0)
    assert test.estimate.lo > 0 and not test.estimate.unresolved
    rec = out.to_dict()["recommendation"]
    assert rec == {**rec, "rule": "accuracy", "keep_step": 30, "keep_final": False}
    assert "+50.00 pp" in out.recommendation.reason
    # matched NLL picks step 20, identical to the final checkpoint in accuracy: gain exactly 0
    nll = out.rules["nll"]
    assert list(nll.steps) == [20]
    assert nll.split_validation.estimate.mean == 0.0 and nll.split_validation.estimate.unresolved
    assert nll.test.estimate.mean == 0.0
    # agreement: the plurality is the (shared) wrong answer on odd items, so the four other
    # checkpoints tie and the final checkpoint is in the tie set -> keep the final checkpoint
    agr = out.rules["agreement"]
    assert agr.choice["steps"] == [10, 20, 40, 50]
    assert agr.probabilities == {"10": 0.25, "20": 0.25, "40": 0.25, "50": 0.25}
    assert agr.split_validation.estimate.mean == 0.0
    by_agreement = select_checkpoint(records, "run-s42", rule="agreement", settings=FAST).recommendation
    assert by_agreement.keep_final and by_agreement.keep_step == 50
    assert "final checkpoint itself" in by_agreement.reason


def test_equal_checkpoints_keep_the_final_one(records):
    out = select_checkpoint(records, "flat-s42", settings=FAST)
    for rule in ("accuracy", "agreement", "nll"):
        r = out.rules[rule]
        assert list(r.steps) == STEPS  # one tie set: every checkpoint
        sv = r.split_validation.estimate
        assert (sv.mean, sv.lo, sv.hi, sv.unresolved) == (0.0, 0.0, 0.0, True)
        assert r.test.estimate.mean == 0.0 or r.test.estimate.unresolved
    assert out.recommendation.keep_final and out.recommendation.keep_step == 50


def test_equal_in_truth_but_noisy_keeps_the_final_one(records):
    out = select_checkpoint(records, "noisy-s42", settings=FAST)
    acc = out.rules["accuracy"]
    assert list(acc.steps) != [50]  # validation noise does pick some other checkpoint…
    sv = acc.split_validation.estimate
    assert sv.unresolved and sv.lo < 0 < sv.hi  # …but held-out halves do not back it
    rec = out.recommendation
    assert rec.keep_final and rec.keep_step == 50 and "contains 0" in rec.reason


def loop_gains(signal, correct, maximize, in_s, weights):
    """Plain reference: for each weight row and partition, choose on one half, score on the other."""
    out = []
    for w in weights:
        per_partition = []
        for mask in in_s.astype(bool):
            gains = []
            for choose_half, score_half in ((mask, ~mask), (~mask, mask)):
                score = (signal * (w * choose_half)).sum(axis=1)
                best = score.max() if maximize else score.min()
                tied = np.flatnonzero(score == best)
                acc = (correct * (w * score_half)).sum(axis=1) / (w * score_half).sum()
                gains.append(100 * (acc[tied].mean() - acc[-1]))
            per_partition.append(np.mean(gains))
        out.append(np.mean(per_partition))
    return np.array(out)


@pytest.mark.parametrize("maximize", [True, False])
def test_vectorized_split_gains_equal_a_plain_loop(maximize):
    rng = np.random.default_rng(11)
    T, n = 4, 23  # odd n: halves of 11 and 12
    correct = rng.random((T, n)) < 0.5
    signal = correct.astype(float) if maximize else rng.integers(1, 9, (T, n)) / 8.0
    signal[3] = signal[1]  # an exactly tied pair (identical checkpoints)
    in_s = partition_masks(np.array([f"i{k}" for k in range(n)]), 7, seed=1)
    assert (in_s.sum(axis=1) == 11).all()
    weights = np.vstack([np.ones(n), rng.integers(0, 3, (4, n)).astype(float)])
    got = split_validation_gains(signal, correct, maximize, in_s, weights)
    np.testing.assert_allclose(got, loop_gains(signal, correct, maximize, in_s, weights), atol=1e-9)


def one_trajectory_gains(signal: np.ndarray, correct: np.ndarray, maximize: bool, in_s: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``split_validation_gains`` as it was before issue 37 (one trajectory, float64 products):
    the reference the pooled kernel must reproduce bit for bit."""
    W, P = weights.shape[0], in_s.shape[0]
    corr = correct.astype(np.float64)
    total_sig = core.weighted_sums(signal, weights.T)  # (T, W)
    total_corr = corr @ weights.T
    total_w = weights.sum(axis=1)
    gains = np.empty(W * P)
    rows_per_chunk = max(1, 4_000_000 // (P * max(1, weights.shape[1])))
    for start in range(0, W, rows_per_chunk):
        stop = min(W, start + rows_per_chunk)
        masks = (weights[start:stop, None, :] * in_s[None, :, :]).reshape(-1, in_s.shape[1])  # (w*P, n)
        rep = np.repeat(np.arange(start, stop), P)
        sig_in = core.weighted_sums(signal, masks.T)
        sig_out = total_sig[:, rep] - sig_in
        corr_in = corr @ masks.T
        corr_out = total_corr[:, rep] - corr_in
        size_in = masks.sum(axis=1)
        size_out = total_w[rep] - size_in
        with np.errstate(invalid="ignore", divide="ignore"):
            g = []
            for choose_on, score_on, size in ((sig_in, corr_out, size_out), (sig_out, corr_in, size_in)):
                p = core.tie_probabilities(choose_on, maximize=maximize)
                # differences to the final checkpoint first: an exact 0 when the choice equals it
                g.append((p * (score_on - score_on[-1])).sum(axis=0) / np.where(size > 0, size, np.nan))
        gains[start * P : stop * P] = 100.0 * np.nanmean(np.stack(g), axis=0)
    return gains.reshape(W, P).mean(axis=1)


@pytest.mark.parametrize("maximize", [True, False])
def test_pooled_split_gains_equal_one_trajectory_at_a_time(maximize):
    """Trajectories of one pool (different checkpoint counts, tied checkpoints, integer and
    float signals) through one pooled call: the same bits as the old one-trajectory float64
    kernel, and the plain loop's values."""
    rng = np.random.default_rng(5)
    n, P = 31, 6
    ids = np.array([f"q{k}" for k in range(n)])
    in_s = partition_masks(ids, P, seed=2)
    weights = np.vstack([np.ones(n), rng.integers(0, 4, (7, n)).astype(float)])
    corrects, signals = [], []
    for T in (2, 5, 9):
        correct = rng.random((T, n)) < 0.5
        correct[-1] = correct[0]  # the final checkpoint tied with the first
        corrects.append(correct)
        signals.append(correct.astype(np.int64) if maximize else rng.integers(0, 3, (T, n)))
    signals.append(rng.gamma(2.0, 1.0, (4, n)))  # a float (NLL) signal
    signals[-1][2] = signals[-1][1]
    corrects.append(rng.random((4, n)) < 0.5)
    for w in (np.ones((1, n)), weights):
        got = pooled_split_gains(signals, corrects, maximize, in_s, w)
        for g, sig, correct in zip(got, signals, corrects, strict=True):
            want = one_trajectory_gains(sig.astype(np.float64), correct, maximize, in_s, w)
            np.testing.assert_array_equal(g, want)
            np.testing.assert_allclose(g, loop_gains(sig, correct, maximize, in_s, w), atol=1e-9)
            np.testing.assert_array_equal(split_validation_gains(sig, correct, maximize, in_s, w), want)


@pytest.mark.parametrize("rule", ["accuracy", "agreement", "nll"])
def test_keep_rows_are_select_s_own_answers(records, rule):
    """The keep table (pooled: two of the three trajectories share a validation pool) gives
    each trajectory's ``select`` numbers, for every rule; its full-pool choice is
    choose_trajectory's."""
    from ckptsel.records.load import load_validation
    from ckptsel.workflows.advise.selection import select_all

    validation = load_validation(records)
    assert len({pool_key(v) for v in validation}) == 2
    full = select_all(records, rule=rule, settings=FAST)
    keep = select_all(records, rule=rule, settings=FAST, keep_only=True)
    assert keep.keep == full.keep and not keep.selections and len(full.selections) == 3
    for v in validation:
        want = choose_trajectory(v, ChoiceSettings(permutations=3))[("nested", rule, FULL)]
        np.testing.assert_array_equal(full_pool_choice(RULES[rule].signal(v), RULES[rule].maximize), want)


def test_select_without_test_records(tmp_path):
    gen, nll = rg.tables([planted(n=64)])
    gen = gen[gen["split"] == "validation"]
    records = rg.write(tmp_path / "records", gen, nll)
    out = select_checkpoint(records, "run-s42", settings=FAST).to_dict()  # as `select --json`
    assert out["test_items"] is None and out["rules"]["accuracy"]["test"] is None
    assert [c["budget"] for c in out["rules"]["accuracy"]["budget_curve"]] == ["32", "64", "full"]
    assert out["recommendation"]["keep_step"] == 30


def test_select_cli_json_and_errors(records, capsys):
    args = ["select", str(records), "--trajectory", "run-s42", "--partitions", "40", "--draws", "200"]
    with pytest.raises(SystemExit) as exc:
        main([*args, "--json"])
    assert exc.value.code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["recommendation"]["keep_step"] == 30 and out["settings"]["partitions"] == 40
    assert out["plausibly_best"]["steps"] == [30] and out["chosen_estimate"]["steps"] == [30]
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert "keep checkpoint 30" in text and "split-validation" in text
    flat = " ".join(text.split())
    assert "plausibly best (95% model confidence set" in flat and "steps 30 " in flat
    assert "corrected for having been chosen" in flat
    with pytest.raises(SystemExit) as exc:
        main(["select", str(records), "--trajectory", "nope"])
    assert exc.value.code == 2 and "'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main([*args, "--rule", "oracle"])
    assert exc.value.code == 2 and "unknown rule" in capsys.readouterr().err
    with pytest.raises(CkptselError, match="draws"):
        select_checkpoint(records, "run-s42", settings=SelectSettings(draws=1))


# --------------------------------------------------------------------------- plausibly best, chosen estimate
def test_plausibly_best_and_chosen_estimate_known_answers(records):
    # planted: step 30 right everywhere, the others identical and right on even items only;
    # every paired difference to step 30 is +50 pp: the set is {30}; step 30 is right on all 200
    # items, so its accuracy has no variance: the exact interval (Clopper-Pearson, simultaneous
    # over the 5 checkpoints) and the median-unbiased estimate 0.5^(1/200), never 100 ± 0
    out = select_checkpoint(records, "run-s42", settings=FAST).to_dict()
    pb, ce = out["plausibly_best"], out["chosen_estimate"]
    assert pb["steps"] == [30] and pb["level"] == 0.95 and "confidence set" in pb["method"]
    assert "0.05" in pb["error_rate"] and pb["mcs_p_values"]["30"] == 1.0
    assert [e["rejected"] for e in pb["eliminations"]] == [True] * 4
    assert ce["steps"] == [30] and ce["naive"] == {"mean": 100.0, "lo": 100.0, "hi": 100.0}
    assert ce["mean"] == pytest.approx(100 * 0.5 ** (1 / 200), abs=1e-6)
    assert ce["lo"] == pytest.approx(100 * (0.05 / 10) ** (1 / 200), abs=1e-6) and ce["hi"] == 100.0
    assert ce["method"].startswith("exact: Clopper-Pearson")
    # identical checkpoints: nothing can be told apart, every step is plausibly best
    flat = select_checkpoint(records, "flat-s42", settings=FAST).to_dict()
    assert flat["plausibly_best"]["steps"] == STEPS
    assert flat["chosen_estimate"]["steps"] == STEPS  # all tied at the top
    # deterministic: same seed, same answer
    again = select_checkpoint(records, "run-s42", settings=FAST).to_dict()
    assert json.dumps(again) == json.dumps(out)


def _range_statistic_loop(x, se, xb, members):
    """The MCS range statistic and its bootstrap p-value, by plain loops."""
    tr = max(abs(x[i] - x[j]) / se[i, j] for i in members for j in members if i != j)
    hits = 0
    for row in xb:
        d = row - x
        trb = max(abs(d[i] - d[j]) / se[i, j] for i in members for j in members if i != j)
        hits += trb >= tr - 1e-12
    return tr, hits / len(xb)


def test_model_confidence_set_first_test_matches_a_loop():
    from ckptsel.stats.resample import Clusters, resample_counts
    from ckptsel.stats.winners import accuracy_moments, bootstrap_accuracies, model_confidence_set

    rng = np.random.default_rng(4)
    correct = rng.random((1, 4, 60)) < np.array([0.4, 0.5, 0.55, 0.6])[None, :, None]
    clusters = Clusters.of(np.repeat(np.arange(30), 2))
    x, sums, sigma = accuracy_moments(correct, clusters)
    # CR1 covariance by hand: G/(G−1) Σ_g r_g r_gᵀ / n²
    r = correct[0].reshape(4, 30, 2).sum(axis=2).T - 2 * x[0]
    assert np.allclose(sigma[0], 30 / 29 * r.T @ r / 3600)
    xb = bootstrap_accuracies(sums, clusters.sizes, resample_counts(30, 200, np.random.default_rng(1)))
    mcs = model_confidence_set(x, sigma, xb, 0.95)
    d = np.diag(sigma[0])
    se = np.sqrt(d[:, None] + d[None, :] - 2 * sigma[0])
    tr, p = _range_statistic_loop(x[0], se, xb[0], range(4))
    assert mcs["statistic"][0, 0] == pytest.approx(tr) and mcs["p_steps"][0, 0] == pytest.approx(p)
    assert mcs["p_mcs"][0].max() == 1.0  # the last survivor
    assert mcs["in_set"][0, np.argmax(x[0])]  # the empirical best is never eliminated first


def test_small_truth_known_coverage():
    """A fast version of benchmarks/bench_select.py: 5 checkpoints, the best +3 pp."""
    from ckptsel.stats.resample import Clusters, resample_counts
    from ckptsel.stats.winners import accuracy_moments, bootstrap_accuracies, model_confidence_set, naive_winner, winner_interval

    p = np.array([0.50, 0.56, 0.59, 0.59, 0.56])
    rng = np.random.default_rng(11)
    reps, n = 300, 200
    u = rng.standard_normal((reps, 1, n))
    z = 0.85 * u + np.sqrt(1 - 0.85**2) * rng.standard_normal((reps, 5, n))
    correct = z < np.array([NormalDist().inv_cdf(q) for q in p])[None, :, None]
    clusters = Clusters.of(None, n)
    x, sums, sigma = accuracy_moments(correct, clusters)
    xb = bootstrap_accuracies(sums, clusters.sizes, resample_counts(n, 300, np.random.default_rng(2)))
    in_set = model_confidence_set(x, sigma, xb, 0.95)["in_set"]
    assert in_set[:, 2:4].any(axis=1).mean() >= 0.95
    top = (x >= x.max(axis=1, keepdims=True) - 1e-12).astype(float)
    truth = top / top.sum(axis=1, keepdims=True) @ p
    est, lo, hi, _ = winner_interval(x, sigma, n, n, 0.95, jitter=4)
    cover = ((lo <= truth) & (truth <= hi)).mean()
    _, nlo, nhi = naive_winner(x, sigma, 0.95)
    naive = ((nlo <= truth) & (truth <= nhi)).mean()
    assert 0.90 <= cover <= 0.99 and naive < cover
    assert (est - truth).mean() < (x.max(axis=1) - truth).mean()  # less optimistic than the max


def test_model_confidence_set_decisive_without_variance():
    from ckptsel.stats.resample import Clusters, resample_counts
    from ckptsel.stats.winners import accuracy_moments, bootstrap_accuracies, model_confidence_set

    # step 1 right everywhere, step 2 on even items, step 0 on none; every cluster (a pair
    # {even, odd}) shows the same differences, so they have no variance and are decisive
    c = np.zeros((1, 3, 40), dtype=bool)
    c[0, 1] = True
    c[0, 2] = np.arange(40) % 2 == 0
    clusters = Clusters.of(np.repeat(np.arange(20), 2))
    x, sums, sigma = accuracy_moments(c, clusters)
    xb = bootstrap_accuracies(sums, clusters.sizes, resample_counts(20, 100, np.random.default_rng(0)))
    mcs = model_confidence_set(x, sigma, xb, 0.95)
    assert mcs["in_set"].tolist() == [[False, True, False]]
    assert mcs["p_mcs"].tolist() == [[0.0, 1.0, 0.0]]


def test_split_validation_keeps_whole_groups_on_one_side():
    """Issue 29: the halves split items one by one even when they come in groups, so a question's
    variants sat on both sides: the choice was scored on near-copies of the items it was made on.
    Truth here is 0 (every checkpoint equally good on new questions)."""
    rng = np.random.default_rng(29)
    T, G, size = 6, 30, 4
    n = G * size
    ids = np.array([f"i{k:03d}" for k in range(n)])
    groups = np.repeat([f"q{g:02d}" for g in range(G)], size)
    item_wise, group_wise = [], []
    for _ in range(40):  # trajectories
        per_group = rng.random((T, G)) < 0.5  # a checkpoint answers all variants of a question alike
        correct = np.repeat(per_group, size, axis=1)
        signal = correct.astype(np.float64)  # the accuracy rule
        for masks, out in ((partition_masks(ids, 20, seed=3), item_wise), (partition_masks(ids, 20, seed=3, groups=groups), group_wise)):
            out.append(split_validation_gains(signal, correct, True, masks, np.ones((1, n)))[0])
    masks = partition_masks(ids, 20, seed=3, groups=groups)
    per_group_share = masks.reshape(20, G, size).mean(axis=2)
    assert set(np.unique(per_group_share)) <= {0.0, 1.0}  # no group split
    assert np.abs(masks.sum(axis=1) - n / 2).max() <= size / 2  # halves of about n/2 items
    assert np.mean(item_wise) > 5.0  # pp: the leak (variants on both sides)
    assert abs(np.mean(group_wise)) < 2.0, np.mean(group_wise)
    # singletons: the item-wise halves, exactly as before
    singletons = partition_masks(ids, 5, seed=3, groups=ids)
    np.testing.assert_array_equal(singletons, partition_masks(ids, 5, seed=3))


def test_chosen_estimate_does_not_move_with_the_seed():
    """Issue 29: the selection-corrected estimate moved with --seed by 0.5 pp (sd, 100 items): its
    projection value came from 4000 Gaussian draws and 16 jitter draws of the seed's stream. Now
    the stream is fixed and large (65536 draws, 256 Latin-hypercube jitter points): the seed does
    not move it, and its own Monte-Carlo error is under 0.1 pp."""
    from ckptsel.stats.resample import Clusters
    from ckptsel.stats.winners import accuracy_moments, winner_interval
    from ckptsel.workflows.advise.selection import best_checkpoints

    rng = np.random.default_rng(5)
    p = np.array([0.40, 0.46, 0.50, 0.53, 0.555, 0.545, 0.535, 0.515])
    correct = rng.random((8, 100)) < p[:, None]
    groups = np.arange(100).astype(str)
    means = {best_checkpoints(correct, groups, np.arange(8), SelectSettings(draws=100, seed=s))[1].mean for s in (1, 2, 3)}
    assert len(means) == 1, means
    x, _, sigma = accuracy_moments(correct[None], Clusters.of(groups, 100))
    once = winner_interval(x, sigma, 100, 100, 0.95)
    again = winner_interval(x.copy(), sigma.copy(), 100, 100, 0.95)  # nothing random: the same bits
    assert all(np.array_equal(a, b) for a, b in zip(once, again, strict=True))


# --------------------------------------------------------------------------- every trajectory (issue 39)
def test_select_all_keep_table_in_summary_report_and_verify(records, tmp_path, capsys):
    """``select --all``: one row per trajectory, each select's own recommendation (the planted
    run keeps step 30, the flat ones their final checkpoint); ``analyze`` writes the same rows
    into summary.json (made with keep_settings: select's defaults, the analysis' seed and
    level, or for this quick analysis a quick table that says it is provisional) and
    report.html, and
    ``verify`` recomputes them: an edited row fails it."""
    from dataclasses import replace

    from ckptsel.report.html import render_html
    from ckptsel.workflows.advise.selection import keep_provisional, keep_settings, select_all
    from ckptsel.workflows.analysis import analyze, verify

    args = ["select", str(records), "--all", "--partitions", "30", "--draws", "300", "--bootstrap-partitions", "10"]
    with pytest.raises(SystemExit) as exc:
        main([*args, "--json"])
    assert exc.value.code == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out) == ["rule", "settings", "trajectories", "selections", "notes"]  # notes: issue 48
    rows = {r["trajectory"]: r for r in out["trajectories"]}
    assert list(rows) == ["flat-s42", "noisy-s42", "run-s42"]  # the records' order
    assert (rows["run-s42"]["keep_step"], rows["run-s42"]["keep_final"]) == (30, False)
    assert rows["run-s42"]["choice"] == [30] and rows["run-s42"]["gain"]["mean"] == pytest.approx(50.0)
    for name in ("flat-s42", "noisy-s42"):
        assert (rows[name]["keep_step"], rows[name]["keep_final"]) == (50, True)
    settings = SelectSettings(**out["settings"])
    for name, row in rows.items():  # each row is select's own answer for that trajectory
        one = select_checkpoint(records, name, settings=settings).to_dict()
        assert out["selections"][name] == one
        assert row["keep_step"] == one["recommendation"]["keep_step"]
        assert row["reason"] == one["recommendation"]["reason"]
        sv = one["rules"]["accuracy"]["split_validation"]
        assert row["gain"] == {k: sv[k] for k in row["gain"]}
    with pytest.raises(SystemExit) as exc:
        main(args)
    text = " ".join(capsys.readouterr().out.split())
    assert "which checkpoint to keep: rule accuracy, 3 trajectories" in text
    assert "1 of 3 trajectories keep an earlier checkpoint" in text and "+50.00" in text
    for bad in (["select", str(records)], [*args, "--trajectory", "run-s42"]):
        with pytest.raises(SystemExit) as exc:
            main(bad)
        err = capsys.readouterr().err.strip()
        assert exc.value.code == 2 and "--all" in err and len(err.splitlines()) == 1

    res = tmp_path / "results"
    summary = analyze(records, res, permutations=12, draws=200)
    quick = keep_settings(summary.seed, summary.level, 200, 12)  # a quick analysis' quick table
    assert keep_settings(summary.seed, summary.level) == SelectSettings()  # the analysis' defaults
    assert (quick.partitions, quick.draws, quick.bootstrap_partitions) == (12, 200, 5)
    expected = select_all(records, settings=quick)
    assert summary.keep == replace(expected.keep, provisional=keep_provisional(quick))
    assert summary.keep.provisional.startswith("made with fewer partitions 12 < 200")
    assert json.loads((res / "summary.json").read_text())["keep"] == summary.keep.to_dict()
    page = render_html(summary, [], {})  # report.html's page (its figures take seconds to draw)
    assert "Which checkpoint to keep" in page and "1 of 3 trajectories keep an earlier checkpoint" in page
    assert "<td>run-s42</td><td>cfg</td><td>50</td><td>30</td>" in page
    assert any("reproduced exactly" in line for line in verify(res))
    data = json.loads((res / "summary.json").read_text())
    data["keep"]["trajectories"][2]["keep_step"] = 50  # an edited answer
    (res / "summary.json").write_text(json.dumps(data, indent=1) + "\n")
    with pytest.raises(VerificationError, match="keep"):
        verify(res)


def test_analyze_keep_table_is_select_all_at_its_defaults(tmp_path, capsys):
    """Issue 44: the keep table ``analyze`` writes at its default permutations (with draws at
    least select's) is ``ckptsel select --all`` at its CLI defaults, row for row — run as a user
    runs them. Small preset, seed 2: the former cheap table (200 draws, 5 bootstrap
    partitions) kept a checkpoint there that select's defaults do not. A quicker analysis
    makes a quicker table, and says it is provisional (summary.json, terminal, report)."""
    sim, res = tmp_path / "sim", tmp_path / "res"
    assert run_cli(["simulate", sim, "--preset", "small", "--seed", 2], capsys)[0] == 0
    code, said = run_cli(["analyze", sim, "--out", res, "--no-report", "--draws", 1000], capsys)
    assert code == 0, said
    keep = json.loads((res / "summary.json").read_text())["keep"]
    code, said = run_cli(["select", sim, "--all", "--json"], capsys)
    assert code == 0, said
    out = json.loads(said)
    assert keep == {k: out[k] for k in ("rule", "settings", "trajectories")}
    assert "provisional" not in keep
    quick = tmp_path / "quick"
    code, said = run_cli(["analyze", sim, "--out", quick, "--permutations", 20, "--draws", 300], capsys)
    assert code == 0, said
    keep = json.loads((quick / "summary.json").read_text())["keep"]
    assert keep["settings"]["draws"] == 200 and keep["settings"]["bootstrap_partitions"] == 5
    assert keep["provisional"].startswith(
        "made with fewer partitions 20 < 200, draws 200 < 1000, bootstrap partitions 5 < 20, permutations 20 < 200"
    )
    assert "Provisional:" in (quick / "report.html").read_text()
    code, said = run_cli(["verify", quick, "--records", sim], capsys)
    assert code == 0, said
