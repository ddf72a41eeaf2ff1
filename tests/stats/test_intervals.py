"""Interval methods (issue 14) against slow explicit-matrix loops and known answers."""

from __future__ import annotations

import hashlib
import json
import re

import numpy as np
import pytest

from ckptsel.cli.app import main
from ckptsel.stats import bootstrap as bs
from ckptsel.stats import intervals as iv
from ckptsel.stats.estimates import StatSettings, study_warnings
from ckptsel.workflows import analysis as pipeline

import recordsgen as rg


def _clusters(rng, K=5, Q=3, absent=True):
    """Per-trajectory values per configuration (1-4 trajectories each), as lists of (n_k, Q)."""
    per = [rng.normal(loc=rng.normal(), size=(int(rng.integers(1, 5)), Q)) for _ in range(K)]
    if absent:
        per[1][:, 2] = np.nan  # configuration 1 lacks quantity 2 entirely
        per[3][0, 1] = np.nan  # one trajectory of configuration 3 lacks quantity 1
    sums = np.stack([np.nansum(x, axis=0) for x in per])
    sizes = np.stack([(~np.isnan(x)).sum(axis=0) for x in per]).astype(float)
    return per, sums, sizes


def _inv_sqrt(M):
    w, V = np.linalg.eigh(M)
    return V @ np.diag(w**-0.5) @ V.T


def _cr2_reference(y_by_cluster):
    """CR2 variance and Bell–McCaffrey df of the mean of y (intercept-only OLS), from matrices."""
    sizes = [len(y) for y in y_by_cluster]
    y = np.concatenate(y_by_cluster)
    N = len(y)
    X = np.ones((N, 1))
    H = X @ np.linalg.inv(X.T @ X) @ X.T
    M = np.eye(N) - H
    e = M @ y
    mu = float(np.linalg.lstsq(X, y, rcond=None)[0][0])
    bounds = np.cumsum([0] + sizes)
    meat, G = 0.0, []
    for k in range(len(sizes)):
        s = slice(bounds[k], bounds[k + 1])
        A = _inv_sqrt(np.eye(sizes[k]) - H[s, s])
        score = float((X[s].T @ A @ e[s])[0])
        meat += score**2
        a = np.zeros(N)
        a[s] = (A @ X[s] @ np.linalg.inv(X.T @ X)).ravel()
        G.append(M @ a)
    G = np.array(G).T
    lam = np.linalg.eigvalsh(G.T @ G)
    return mu, meat / N**2, lam.sum() ** 2 / (lam**2).sum()


def test_cr2_matches_the_explicit_matrix_formulas():
    per, sums, sizes = _clusters(np.random.default_rng(0))
    mean, var, df = iv.cr2(sums, sizes)
    for q in range(sums.shape[1]):
        clusters = [x[:, q][~np.isnan(x[:, q])] for x in per]
        clusters = [c for c in clusters if len(c)]
        mu, v, d = _cr2_reference(clusters)
        assert mean[q] == pytest.approx(mu, rel=1e-12)
        assert var[q] == pytest.approx(v, rel=1e-10)
        assert df[q] == pytest.approx(d, rel=1e-10)


def test_cr2_with_equal_clusters_is_the_classical_t_interval_on_cluster_means():
    rng = np.random.default_rng(1)
    y = rng.normal(size=(4, 3))  # 4 configurations x 3 seeds
    sums, sizes = y.sum(axis=1)[:, None], np.full((4, 1), 3.0)
    mean, lo, hi = iv.cr2_interval(sums, sizes, 0.95)
    cm = y.mean(axis=1)
    half = 3.182446305284263 * cm.std(ddof=1) / 2.0  # t_{0.975, 3} s / sqrt(4)
    assert lo[0] == pytest.approx(cm.mean() - half, rel=1e-9)
    assert hi[0] == pytest.approx(cm.mean() + half, rel=1e-9)
    _, _, df = iv.cr2(sums, sizes)
    assert df[0] == pytest.approx(3.0)


def test_t_quantile_known_values():
    got = iv.t_quantile(0.975, np.array([1.0, 2.0, 3.0, 10.0, 30.0, 100.0, 1e12]))
    want = [
        12.706204736174707,
        4.302652729749464,
        3.182446305284263,
        2.228138851986274,
        2.042272456301238,
        1.983971518523552,
        1.959963984540054,
    ]
    np.testing.assert_allclose(got, want, rtol=1e-9)
    # df = 2 has a closed form: q = (2p - 1) / sqrt(2 p (1 - p))
    p = 0.9
    assert iv.t_quantile(p, np.array([2.0]))[0] == pytest.approx((2 * p - 1) / np.sqrt(2 * p * (1 - p)), rel=1e-10)


def test_wild_bootstrap_t_matches_a_loop_over_draws():
    per, sums, sizes = _clusters(np.random.default_rng(2), K=4, Q=2, absent=False)
    W = iv.webb_weights(4, 50, seed=5)
    assert set(np.round(np.abs(W).ravel() ** 2, 12)) <= {0.5, 1.0, 1.5}
    mean, se, tstar = iv.wild_t_stats(W, sums, sizes)
    for q in range(2):
        clusters = [x[:, q] for x in per]
        mu, v, _ = _cr2_reference(clusters)
        assert se[q] == pytest.approx(np.sqrt(v), rel=1e-10)
        for b in range(len(W)):
            ystar = [mu + W[b, k] * (c - mu) for k, c in enumerate(clusters)]
            mu_b, v_b, _ = _cr2_reference(ystar)
            assert tstar[b, q] == pytest.approx((mu_b - mu) / np.sqrt(v_b), rel=1e-8, abs=1e-10)
    _, lo, hi = iv.wild_interval(W, sums, sizes, 0.9)
    qlo, qhi = np.quantile(tstar, [0.05, 0.95], axis=0)
    np.testing.assert_allclose(lo, mean - qhi * se)
    np.testing.assert_allclose(hi, mean - qlo * se)


def _twoway_reference(tasks, total):
    """Loops over configurations and questions: CR2 part, question part, interaction overlap."""
    vq = overlap = 0.0
    for util, n in tasks:  # util (K_t, N_t) per-configuration sums, n (K_t,) trajectory counts
        K, N = util.shape
        z = [sum(util[k, j] for k in range(K)) for j in range(N)]
        zbar = sum(z) / N
        vq += sum((x - zbar) ** 2 for x in z) / (N - 1) / N / total**2
        ybar = util / n[:, None]
        row = [sum(ybar[k]) / N for k in range(K)]
        col = [sum(ybar[:, j]) / K for j in range(N)]
        grand = sum(row) / K
        ss = sum((ybar[k, j] - row[k] - col[j] + grand) ** 2 for k in range(K) for j in range(N))
        overlap += ss / ((K - 1) * (N - 1)) * sum(n**2) / N / total**2
    return vq, overlap


def test_twoway_variance_matches_loops():
    rng = np.random.default_rng(3)
    shapes = {"a": (3, 7), "b": (4, 5)}
    utilities, index, rows, ref_tasks = {}, {}, [], []
    off = 0
    for task, (K, N) in shapes.items():
        n = rng.integers(1, 4, K).astype(float)
        util = rng.normal(size=(K, N)) * n[:, None]
        utilities[task] = util[:, :, None]
        index[task] = np.arange(off, off + K)
        rows.append(n)
        ref_tasks.append((util, n))
        off += K
    sizes = np.concatenate(rows)[:, None]
    vc, vq, overlap, dfc = iv.twoway_variance(utilities, index, sizes, [0])
    rvq, roverlap = _twoway_reference(ref_tasks, sizes.sum())
    assert vq[0] == pytest.approx(rvq, rel=1e-12)
    assert overlap[0] == pytest.approx(roverlap, rel=1e-12)
    conf_sums = np.concatenate([u.mean(axis=1) for u, _ in ref_tasks])
    _, v_ref, df_ref = _cr2_reference([np.full(int(n), s / n) for s, n in zip(conf_sums, sizes[:, 0], strict=True)])
    assert vc[0] == pytest.approx(v_ref, rel=1e-10) and dfc[0] == pytest.approx(df_ref, rel=1e-10)


def test_twoway_variance_is_unbiased_for_crossed_random_effects():
    """y_kj = a_k + b_j + e_kj: Var(mean) = σ_A²/K + σ_B²/N + σ_E²/(KN); the corrected two-way
    variance hits it on average, the pigeonhole bootstrap overshoots by about 2σ_E²/(KN)."""
    rng = np.random.default_rng(4)
    K, N, sa, sb, se = 6, 40, 1.0, 2.0, 8.0
    truth = sa**2 / K + sb**2 / N + se**2 / (K * N)
    v, pig = [], []
    sizes = np.ones((K, 1))
    for r in range(400):
        y = rng.normal(0, sa, (K, 1)) + rng.normal(0, sb, (1, N)) + rng.normal(0, se, (K, N))
        vc, vq, ov, _ = iv.twoway_variance({"t": y[:, :, None]}, {"t": np.arange(K)}, sizes, [0])
        v.append(vc[0] + vq[0] - ov[0])
        if r < 100:
            C = bs.configuration_counts(K, 400, seed=r)
            _, _, joint = bs.question_replicates({"t": y[:, :, None]}, {"t": np.arange(K)}, sizes, C, 400, r, [0])
            pig.append(joint[:, 0].var())
    assert np.mean(v) == pytest.approx(truth, rel=0.05)
    assert np.mean(pig) > truth * 1.15  # the stacked resampling double counts the interaction


def test_webb_weights_have_mean_zero_and_unit_variance():
    W = iv.webb_weights(8, 20000, seed=1)
    assert abs(W.mean()) < 0.01 and W.var() == pytest.approx(1.0, abs=0.01)


# ------------------------------------------------------------------------------ pipeline
@pytest.fixture
def studies(tmp_path):
    out = {}
    for n_configs, seed in ((5, 21), (3, 22)):
        rng = np.random.default_rng(seed)
        gen, nll = rg.tables(rg.random_study(rng, n_configs=n_configs, seeds=3, T=(4, 8), n_val=(70, 140), n_test=(40, 90)))
        out[n_configs] = rg.write(tmp_path / f"rec{n_configs}", gen, nll)
    return out


# SHA-256 of summary.json (less the warnings, whose few-configurations threshold issue 14 moved,
# and the protocol line issue 23 added) written by ckptsel before issue 14 (commit 483c591) for these two studies,
# with the zero-width intervals that issue 29 made *not estimable* (by_task strata and sensitivities that
# 1-3 configurations carry, each with no spread) written back as they were (rg.as_zero_width).
BEFORE = {
    5: "903d8c307150050138ac4a94040545968f968aebc6f5e539f42f3aa5177af692",
    # issue 29: two by_task/b thinning-2 estimates of this study (one configuration each) had a mean
    # of ~1e-12, stored as +0.00 [+0.00, +0.00] but *resolved* (the flag read the unrounded bounds);
    # they are not estimable now, so the zero-width form cannot give the old bytes back (it reads
    # them unresolved). Everything else is unchanged (checked against the summary of d664043).
    3: "6eba022f7ea8d9c7c0299a332cefc262cb5387c53112b0cbbd0cac8631c1cb04",
}


def test_percentile_reproduces_the_numbers_from_before_issue_14(studies, tmp_path):
    for n, rec in studies.items():
        s = pipeline.analyze(rec, tmp_path / f"out{n}", permutations=20, draws=1500, interval="percentile")
        assert s.interval is None and "interval" not in s.to_dict()
        # the keep table (issue 39) and the tasks' signal and noise (issue 46) are new; the rest
        # is the bytes of before
        s = {k: v for k, v in s.to_dict().items() if k not in ("warnings", "protocol", "keep", "signal_noise")}
        assert "not_estimable" in json.dumps(s)  # these studies have strata of one configuration
        found = []  # issues 38, 44: intervals read unresolved by the small-design rule
        s = rg.as_resolvable(rg.as_zero_width(s), found)
        assert hashlib.sha256(pipeline.summary_json(s).encode()).hexdigest() == BEFORE[n]
        # only configuration intervals: the percentile one is never measured valid, and the
        # sign-flip test of 2-5 configurations cannot reject (its smallest p is 2/32); the joint
        # percentile interval's configuration part is valid from 4 configurations, and its
        # question part's sign-flip test rejects wherever it excludes 0 here
        assert len(found) == {5: 152, 3: 62}[n]
        assert all(
            re.fullmatch(
                r"the percentile configuration interval was not measured valid at [2-5] "
                r"configurations \(BENCHMARKS.md\), and the exact sign-flip test's p = "
                r"[0-9.]+ > 0.05",
                why,
            )
            for why in found
        ), set(found)


def test_default_interval_is_recorded_and_verified(studies, tmp_path):
    out = tmp_path / "cr2"
    s = pipeline.analyze(studies[5], out, permutations=20, draws=300)
    assert s.interval == StatSettings().interval
    perc = pipeline.analyze(studies[5], tmp_path / "p", permutations=20, draws=300, interval="percentile")
    # same point estimates, other intervals
    assert s.gains.get("G", "accuracy").mean == perc.gains.get("G", "accuracy").mean
    assert s.gains.get("G", "accuracy").lo != perc.gains.get("G", "accuracy").lo
    assert s.question_bootstrap == perc.question_bootstrap  # the question family is unchanged
    joint, joint_perc = s.joint_bootstrap.to_dict(), perc.joint_bootstrap.to_dict()
    for key in ("budget", "D"):
        for rule, v in joint[key].items():
            assert v.keys() == joint_perc[key][rule].keys()
    lines = pipeline.verify(out, studies[5])  # protocol, choices, summary, manifest, every file, run.json
    assert len(lines) == 6 and lines[0] == "protocol: not pre-registered"
    assert lines[2].endswith("reproduced exactly")
    data = json.loads((out / "summary.json").read_text())
    data["interval"] = "wild"  # verify must use the recorded method: another one cannot match
    (out / "summary.json").write_text(pipeline.summary_json(data))
    with pytest.raises(Exception, match="differ"):
        pipeline.verify(out, studies[5])


def test_cli_rejects_an_unknown_interval(studies, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["analyze", str(studies[3]), "--out", str(tmp_path / "x"), "--interval", "bca", "--no-report"])
    assert exc.value.code == 2
    assert "--interval must be one of" in capsys.readouterr().err


def test_few_configuration_warning_quotes_the_measurement():
    for method in iv.METHODS:
        k = __import__("ckptsel.stats.estimates", fromlist=["x"]).FEW_CONFIGURATIONS[method][0]
        assert any("configuration(s)" in w for w in study_warnings(k - 1, interval=method))
        assert not study_warnings(k, interval=method)


# ------------------------------------------------------------------------------ issue 29: no variance, no interval
@pytest.fixture(scope="module")
def few(tmp_path_factory):
    """Records of one task with 1, 2 and 3 configurations (3 seeds each)."""
    root = tmp_path_factory.mktemp("few")
    out = {}
    for k in (1, 2, 3):
        gen, nll = rg.tables(
            rg.random_study(np.random.default_rng(40 + k), n_configs=k, seeds=3, T=(4, 7), n_val=(60, 90), n_test=(40, 60), tasks=("a",))
        )
        out[k] = rg.write(root / f"rec{k}", gen, nll)
    return out


def _estimates_of(node):
    if isinstance(node, dict):
        if {"mean", "lo", "hi", "unresolved"} <= set(node):
            yield node
        else:
            for v in node.values():
                yield from _estimates_of(v)


@pytest.mark.parametrize("method", iv.METHODS)
def test_one_configuration_is_not_estimable_never_resolved(few, tmp_path, method):
    s = pipeline.analyze(few[1], tmp_path / "out", permutations=10, draws=300, interval=method, report=method == "cr2")
    g = s.gains.get("G", "accuracy")
    assert g.mean is not None and g.lo is None and g.hi is None
    assert g.not_estimable == "1 configuration" and g.unresolved and not g.estimable
    d = s.to_dict()
    for block in ("budget", "D", "matched_half", "sensitivities", "by_task", "joint_bootstrap"):
        for e in _estimates_of(d[block]):  # every configuration-level (and joint) estimate
            assert e["lo"] is None and e["hi"] is None and e["unresolved"] is True, (block, e)
            assert e["not_estimable"] == "1 configuration" or (e["mean"] == 0.0 and "not_estimable" not in e)
    from ckptsel.results.estimate import fmt
    from ckptsel.results.summary import Summary

    assert Summary.from_dict(json.loads(pipeline.summary_json(d))) == s  # read back, checked
    assert fmt(g).endswith("not estimable: 1 configuration") and "[" not in fmt(g)
    assert "not estimable: 1 configuration" in s.main_table_markdown()
    if method == "cr2":
        assert "not estimable: 1 configuration" in (tmp_path / "out" / "tables" / "main_table.md").read_text()
        html = (tmp_path / "out" / "report.html").read_text()
        assert "not estimable: 1 configuration" in html and "resolved positive" not in html
        assert "resolved negative" not in html
    # the question family resamples test questions: still an interval
    assert s.question_bootstrap.gains.get("G", "accuracy").estimable


def test_no_spread_across_configurations_is_not_estimable():
    sums = np.array([[2.0, 3.0, 0.0], [2.0, 3.0, 0.0], [2.0, 1.0, 0.0]])  # quantity 0: the same in all three
    sizes = np.ones_like(sums)
    names = [("G", "nested", "accuracy", "full"), ("G", "nested", "nll", "full"), ("G", "nested", "last", "full")]
    means = sums.mean(axis=0)
    from ckptsel.stats.estimates import _configuration_estimates

    for method in iv.METHODS:
        e = _configuration_estimates(names, means, sums, sizes, StatSettings(draws=500, interval=method), 0)
        assert e.get(names[0]).not_estimable == "no spread across the 3 configurations", method
        assert e.get(names[1]).estimable
        last = e.get(names[2])  # exactly 0 everywhere: [0, 0], unresolved, as always
        assert (last.lo, last.hi, last.unresolved) == (0.0, 0.0, True)


def test_one_test_question_cluster_is_not_estimable(few, tmp_path):
    import pandas as pd

    from ckptsel.records.store import write_records

    gen = pd.read_parquet(few[3] / "generations.parquet")
    test = gen["split"] == "test"
    gen.loc[test, "group"] = "one"  # every test item in one cluster
    rec = tmp_path / "rec"
    rec.mkdir()
    write_records(rec / "generations.parquet", gen)
    (rec / "nll.parquet").write_bytes((few[3] / "nll.parquet").read_bytes())
    s = pipeline.analyze(rec, tmp_path / "out", permutations=10, draws=300, report=False)
    q = s.question_bootstrap.gains.get("G", "accuracy")
    assert q.not_estimable == "1 test-question cluster", q
    assert s.question_bootstrap.by_task["a"].get("G", "accuracy").not_estimable == "1 test-question cluster"
    assert s.gains.get("G", "accuracy").estimable  # 3 configurations: the configuration interval stands


def test_wild_at_two_configurations_is_not_estimable_and_says_why(few, tmp_path):
    s = pipeline.analyze(few[2], tmp_path / "out", permutations=10, draws=2000, interval="wild", report=False)
    for e in _estimates_of({k: s.to_dict()[k] for k in ("budget", "D", "by_task")}):
        assert "not_estimable" in e or e["mean"] == 0.0, e
    g = s.gains.get("G", "accuracy")
    assert g.not_estimable == "2 configurations: the wild bootstrap-t needs 3 or more"
    assert any("wild bootstrap-t is degenerate below 3" in w for w in s.warnings)
    assert (
        s.gains.get("G", "accuracy").mean
        == pipeline.analyze(few[2], tmp_path / "cr2", permutations=10, draws=300, report=False).gains.get("G", "accuracy").mean
    )


def test_wild_draws_are_never_dropped_nor_huge():
    """Two configurations: w_1 = -w_2 zeroes both bootstrap scores (V* = 0, δ ≠ 0): t* = ±inf, kept
    (they used to be dropped as NaN, or kept as ±5e7 from rounding)."""
    sums, sizes = np.array([[3.0], [1.0]]), np.array([[2.0], [2.0]])
    W = iv.webb_weights(2, 6000, seed=3)
    _, _, tstar = iv.wild_t_stats(W, sums, sizes)
    opposite = np.isclose(W[:, 0], -W[:, 1])
    assert opposite.mean() == pytest.approx(1 / 6, abs=0.02)
    assert np.isinf(tstar[opposite, 0]).all() and np.isfinite(tstar[~opposite, 0]).all()
    assert np.abs(tstar[~opposite, 0]).max() < 1e3
    _, lo, hi = iv.wild_interval(W, sums, sizes)
    assert np.isnan(lo).all() and np.isnan(hi).all()  # the quantiles fall on infinite draws: undefined
    # three or more configurations: every draw finite, the interval is the quantiles of all of them
    per, sums, sizes = _clusters(np.random.default_rng(8), K=3, Q=3, absent=False)
    W = iv.webb_weights(3, 4000, seed=4)
    _, _, tstar = iv.wild_t_stats(W, sums, sizes)
    assert np.isfinite(tstar).all() and np.abs(tstar).max() < 1e4


def test_a_not_estimable_estimate_reads_back_byte_for_byte():
    import math

    from ckptsel.results.estimate import Estimate

    e = Estimate.without_interval(-1e-17, "1 configuration")  # a mean that rounds to -0.0
    d = e.to_dict()
    assert math.copysign(1.0, d["mean"]) == -1.0
    back = Estimate.read(json.loads(json.dumps(d)), "x")
    assert json.dumps(back.to_dict()) == json.dumps(d) and back == e
    bad = dict(d, lo=1.0)
    with pytest.raises(Exception, match="not_estimable"):
        Estimate.read(bad, "x")
