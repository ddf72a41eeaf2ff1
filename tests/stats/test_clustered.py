"""Clustered question bootstrap (issue 12 part 4) in analyze's test-question bootstrap and in
select: items sharing a `group` are drawn as one cluster; single-item groups change nothing."""

from __future__ import annotations

import numpy as np
import pytest

from ckptsel.records.load import TestData, load_test
from ckptsel.stats.bootstrap import question_replicates
from ckptsel.stats.resample import question_weights, resample_counts
from ckptsel.workflows.advise import selection as sel
from ckptsel.workflows.advise.selection import SelectSettings, select_checkpoint

import recordsgen as rg


def _study(rng, n_items=(30, 17), K=4, Q=5):
    utilities = {t: rng.normal(size=(K, n, Q)) for t, n in zip(("a", "b"), n_items, strict=True)}
    config_index = {"a": np.arange(K), "b": np.arange(K)}
    sizes = rng.integers(1, 3, size=(2 * K, Q)).astype(np.float64)[:K]
    C = resample_counts(K, 1500, np.random.default_rng(3))
    return utilities, config_index, sizes, C


def _run(utilities, config_index, sizes, C, groups, draws=1500):
    return question_replicates(utilities, config_index, sizes, C, draws, 11, [0, 3], groups=groups)


def test_single_item_groups_change_nothing_bit_for_bit():
    rng = np.random.default_rng(0)
    u, ci, sizes, C = _study(rng)
    plain = _run(u, ci, sizes, C, None)
    # unique groups in an order unrelated to the items: still the plain bootstrap, byte for byte
    groups = {t: rng.permutation([f"g{i}" for i in range(x.shape[1])]) for t, x in u.items()}
    single = _run(u, ci, sizes, C, groups)
    assert plain[0].tobytes() == single[0].tobytes()
    assert plain[2].tobytes() == single[2].tobytes()
    for t in u:
        assert plain[1][t].tobytes() == single[1][t].tobytes()


def test_duplicated_items_as_pairs_equal_the_plain_bootstrap_of_the_originals():
    """Each item doubled into a 2-item cluster: drawing clusters = drawing the original items."""
    rng = np.random.default_rng(1)
    u, ci, sizes, C = _study(rng)
    plain = _run(u, ci, sizes, C, None)
    doubled = {t: np.repeat(x, 2, axis=1) for t, x in u.items()}
    groups = {t: np.repeat([f"q{i}" for i in range(x.shape[1])], 2) for t, x in u.items()}
    clustered = _run(doubled, ci, sizes, C, groups)
    np.testing.assert_array_equal(plain[0], clustered[0])
    np.testing.assert_array_equal(plain[2], clustered[2])
    # without the clusters the doubled pool would look twice as precise
    naive = _run(doubled, ci, sizes, C, None)
    assert naive[0][:, 0].std() < 0.8 * plain[0][:, 0].std()


def test_uneven_clusters_against_a_loop():
    rng = np.random.default_rng(2)
    K, n, Q, draws, seed = 3, 11, 2, 200, 11
    util = {"a": rng.normal(size=(K, n, Q))}
    sizes = np.ones((K, Q))
    groups = np.array(["x", "y", "x", "z", "z", "z", "w", "y", "v", "v", "u"])
    pooled, per_task, _ = question_replicates(util, {"a": np.arange(K)}, sizes, None, draws, seed, (), groups={"a": groups})
    # loop reference: clusters coded by first appearance, drawn with the same generator
    order = list(dict.fromkeys(groups))
    counts = resample_counts(len(order), draws, np.random.default_rng([seed, 2, 0, 0]))
    d = util["a"].sum(axis=0)  # (n, Q)
    ref = np.empty((draws, Q))
    for b in range(draws):
        num, den = np.zeros(Q), 0.0
        for g, name in enumerate(order):
            members = groups == name
            num += counts[b, g] * d[members].sum(axis=0)
            den += counts[b, g] * members.sum()
        ref[b] = num / den / K
    np.testing.assert_allclose(pooled, ref, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(per_task["a"], ref, rtol=2e-5, atol=1e-6)


def _test_data(correct, groups=None):
    T, N = correct.shape
    return TestData(
        trajectory="t",
        configuration="c",
        task="gsm8k",
        steps=np.arange(1, T + 1),
        item_ids=np.array([f"i{k:03d}" for k in range(N)]),
        subtasks=np.full(N, ""),
        correct=correct,
        answers=correct.astype(np.int64),
        groups=groups,
    )


def test_select_test_gain_clusters():
    rng = np.random.default_rng(4)
    correct = rng.random((3, 40)) < 0.6
    one = np.array([0.0, 1.0, 0.0])  # one checkpoint: compare's paired difference, alike for both
    assert sel.test_gain(one, _test_data(correct), 500, 7, 0.95) == sel.test_gain(
        one, _test_data(correct, np.array([f"g{k}" for k in range(40)])), 500, 7, 0.95
    )
    choice = np.array([0.5, 0.5, 0.0])  # a tie set: the question bootstrap, then clusters matter
    plain = sel.test_gain(choice, _test_data(correct), 500, 7, 0.95)
    single = sel.test_gain(choice, _test_data(correct, np.array([f"g{k}" for k in range(40)])), 500, 7, 0.95)
    assert plain == single and single.clusters == 40
    assert plain.to_dict() == single.to_dict()
    pairs = np.repeat([f"q{k}" for k in range(40)], 2)
    doubled = sel.test_gain(choice, _test_data(np.repeat(correct, 2, axis=1), pairs), 500, 7, 0.95)
    assert doubled.clusters == 40 and doubled.items == 80
    for key in ("mean", "lo", "hi"):
        assert getattr(doubled.estimate, key) == pytest.approx(getattr(plain.estimate, key), abs=1e-9)


def test_question_weights():
    w, G = question_weights(np.array(["a", "b", "a", "c"]), 4, 6, np.random.default_rng(0))
    counts = resample_counts(3, 6, np.random.default_rng(0))
    assert G == 3
    np.testing.assert_array_equal(w, counts[:, [0, 1, 0, 2]])
    w1, G1 = question_weights(np.array(["b", "a", "c"]), 3, 6, np.random.default_rng(0))
    np.testing.assert_array_equal(w1, resample_counts(3, 6, np.random.default_rng(0)))
    assert G1 == 3


def test_select_reports_clusters_and_load_test_returns_groups(tmp_path):
    rng = np.random.default_rng(5)
    T, n, N = 4, 60, 30
    traj = rg.Traj(
        name="run",
        configuration="cfg",
        task="gsm8k",
        steps=[1, 2, 3, 4],
        val_correct=rng.random((T, n)) < 0.5,
        val_answers=np.full((T, n), "A"),
        val_nll=rng.random((T, n)),
        val_tokens=np.full(n, 3),
        test_correct=rng.random((T, N)) < 0.5,
        test_answers=np.full((T, N), "A"),
        val_groups=[f"g{i // 3}" for i in range(n)],
    )
    gen, nll = rg.tables([traj])
    test_rows = gen["split"] == "test"
    gen.loc[test_rows, "group"] = gen.loc[test_rows, "item_id"].str[:-1]  # t000x -> clusters of 10
    records = rg.write(tmp_path / "records", gen, nll)
    (t,) = load_test(records)
    assert len(np.unique(t.groups)) == 3 and t.groups[0] == "t000"
    out = select_checkpoint(records, "run", settings=SelectSettings(partitions=20, draws=200, bootstrap_partitions=5, permutations=20))
    assert out.validation_clusters == 20 and out.validation_items == 60
    acc = out.rules["accuracy"]
    assert acc.split_validation.clusters == 20
    assert acc.test.clusters == 3 and acc.test.items == 30
    assert out.to_dict()["rules"]["accuracy"]["test"]["clusters"] == 3


def test_analyze_reports_test_clusters_and_single_groups_add_nothing(tmp_path):
    from ckptsel.workflows import analysis as pipeline

    rng = np.random.default_rng(8)
    gen, nll = rg.tables(rg.random_study(rng, n_configs=3, seeds=2, T=(3, 5), n_val=(40, 60), n_test=(30, 40), tasks=("a",)))
    plain = pipeline.analyze(rg.write(tmp_path / "r1", gen, nll), tmp_path / "o1", permutations=10, draws=400, interval="percentile")
    assert plain.by_task["a"].population.test_clusters is None
    assert "test_clusters" not in plain.to_dict()["by_task"]["a"]["population"]
    test_rows = gen["split"] == "test"
    gen.loc[test_rows, "group"] = gen.loc[test_rows, "item_id"].str[:-1]  # t000x -> 10 per cluster
    clustered = pipeline.analyze(rg.write(tmp_path / "r2", gen, nll), tmp_path / "o2", permutations=10, draws=400, interval="percentile")
    pop = clustered.by_task["a"].population
    assert pop.test_clusters == len(np.unique(gen.loc[test_rows, "group"])) < pop.test_items
    # same point estimates; only the question-bootstrap intervals change
    a = plain.question_bootstrap.gains.D
    b = clustered.question_bootstrap.gains.D
    assert a.keys() == b.keys() and len(a) >= 3
    for k in a:
        assert a[k].mean == b[k].mean
    assert a != b
