"""Issue 44, item 4: ``select``'s selection-corrected estimate of the most accurate checkpoint
(``chosen_estimate``, :func:`ckptsel.stats.winner_interval`) and its plausibly-best set
(``plausibly_best``, the model confidence set).

Each was wrong in a way a user could meet: the corrected 95% interval covered 71-86% where the
best checkpoint is at 95% on 100 items (every miss optimistic: the winner's plug-in variance
``x(1 − x)/n`` at an accuracy picked for being high is a fraction of the truth's); its
Monte-Carlo parts moved the printed digits by up to 0.25 pp; with every checkpoint tied it read
above the naive estimate; and the plausibly-best set changed with ``--seed``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ckptsel.stats.resample import Clusters
from ckptsel.stats.winners import accuracy_moments, naive_winner, winner_interval

import recordsgen as rg
from clirun import run_cli


def _coverage(p, n: int, reps: int, seed: int) -> tuple[float, float]:
    """Coverage of the corrected and the naive 95% interval of the chosen checkpoint's true
    accuracy over ``reps`` trajectories of independent items (true accuracies ``p``)."""
    p = np.asarray(p)
    rng = np.random.default_rng(seed)
    correct = rng.random((reps, len(p), n)) < p[None, :, None]
    x, _, sigma = accuracy_moments(correct, Clusters.of(None, n))
    top = (x >= x.max(axis=1, keepdims=True) - 1e-12).astype(float)
    truth = top / top.sum(axis=1, keepdims=True) @ p
    _, lo, hi, _ = winner_interval(x, sigma, n, n, 0.95)
    _, nlo, nhi = naive_winner(x, sigma, 0.95)
    return float(((lo <= truth) & (truth <= hi)).mean()), float(((nlo <= truth) & (truth <= nhi)).mean())


@pytest.mark.parametrize("p", [[0.91, 0.92, 0.93, 0.94, 0.95], [0.95] * 10], ids=["5 checkpoints, best at 95%", "10 equal at 95%"])
def test_corrected_interval_covers_near_100_percent(p):
    """Was 86% and 71% (400 trajectories each, BENCHMARKS.md); now ≥ 95% (300 trajectories:
    one standard error is about 1.3 pp at 95%)."""
    cover, naive = _coverage(p, 100, 300, seed=44)
    assert cover >= 0.93, cover
    assert naive < 0.80  # the naive interval is what the correction is for


def test_corrected_interval_covers_few_items():
    """10 equal checkpoints at 60% on 30 items: the issue's check found 87%; measured here it
    was 93-94% before (BENCHMARKS.md) and is ≥ 95% now. A guard: it passes on the old code too."""
    cover, _ = _coverage([0.60] * 10, 30, 300, seed=45)
    assert cover >= 0.93, cover


def test_no_monte_carlo_error_in_the_printed_digits():
    """Was an sd of up to 0.25 pp over streams (65536 projection draws, 256 random jitter
    points); now nothing is random and the 256-node rule is within 0.001 pp of 16 times as many
    nodes."""
    rng = np.random.default_rng(7)
    p = np.array([0.40, 0.46, 0.50, 0.53, 0.555, 0.545, 0.535, 0.515])
    correct = rng.random((12, 8, 64)) < p[None, :, None]
    correct[:4, 5] = correct[:4, 4]  # some ties at the top
    x, _, sigma = accuracy_moments(correct, Clusters.of(None, 64))
    runs = [np.array(winner_interval(x.copy(), sigma.copy(), 64, 64, 0.95)[:3]) for _ in (1, 2)]
    assert np.array_equal(runs[0], runs[1])
    fine = np.array(winner_interval(x, sigma, 64, 64, 0.95, jitter=4096)[:3])
    assert 100 * np.abs(runs[0] - fine).max() < 1e-3


def test_corrected_estimate_never_above_the_naive_one():
    """Every checkpoint tied (the same answers): the corrected estimate read above the naive
    one (the rounding cell of a tie winner lies above its accuracy)."""
    rng = np.random.default_rng(3)
    one = rng.random((20, 1, 50)) < 0.6
    tied = np.repeat(one, 8, axis=1)  # (20 trajectories, 8 identical checkpoints, 50 items)
    x, _, sigma = accuracy_moments(tied, Clusters.of(None, 50))
    est, lo, hi, _ = winner_interval(x, sigma, 50, 50, 0.95)
    naive, _, _ = naive_winner(x, sigma, 0.95)
    assert (est <= naive + 1e-12).all(), (100 * (est - naive)).max()
    assert (lo <= est).all() and (est <= hi).all()
    # and in general: ties or not, any data
    correct = rng.random((200, 6, 40)) < rng.uniform(0.3, 0.97, (200, 6, 1))
    x, _, sigma = accuracy_moments(correct, Clusters.of(None, 40))
    est, lo, hi, _ = winner_interval(x, sigma, 40, 40, 0.95)
    naive, _, _ = naive_winner(x, sigma, 0.95)
    assert (est <= naive + 1e-12).all() and (lo <= est).all() and (est <= hi).all()
    assert ((0 <= lo) & (hi <= 1)).all()


_records = rg.one_trajectory  # (tmp_path, name, val, test=None, groups=None)


def test_plausibly_best_and_chosen_estimate_do_not_move_with_the_seed(tmp_path, capsys):
    """The model confidence set's bootstrap drew from ``[seed, SELECT_WINNER, 0]`` with
    ``--draws`` resamples: its p-values, and near 0.05 its set, changed with ``--seed``. Now a
    fixed stream and size: the same data give the same set and estimate for any seed/draws."""
    rng = np.random.default_rng(12)
    p = np.array([0.50, 0.55, 0.58, 0.60, 0.61, 0.62])
    val = rng.random((6, 120)) < p[:, None]
    rec = _records(tmp_path, "near", val)
    outs = []
    for seed, draws in ((1, 200), (2, 200), (3, 500)):
        code, out = run_cli(["select", rec, "--trajectory", "near", "--json", "--seed", seed, "--draws", draws, "--partitions", 20], capsys)
        assert code == 0, out
        outs.append(json.loads(out))
    for key in ("plausibly_best", "chosen_estimate"):
        assert outs[0][key] == outs[1][key] == outs[2][key], key
    pb, ce = outs[0]["plausibly_best"], outs[0]["chosen_estimate"]
    assert pb["steps"] and ce["lo"] <= ce["mean"] <= ce["naive"]["mean"] and ce["mean"] <= ce["hi"]
