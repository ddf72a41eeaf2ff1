"""The matrix-product bootstraps against plain loops over draws, configurations and questions."""

from __future__ import annotations

import numpy as np
import pytest

from ckptsel.stats import bootstrap as bs
from ckptsel.stats.resample import CHUNK


def test_resample_counts_are_multiplicities_of_a_draw_with_replacement():
    counts = bs.resample_counts(7, 500, np.random.default_rng(0))
    assert counts.shape == (500, 7)
    np.testing.assert_array_equal(counts.sum(axis=1), 7)
    # each unit is drawn with probability 1/7 per draw: mean multiplicity 1
    assert counts.mean() == pytest.approx(1.0)
    assert abs(counts[:, 0].mean() - 1.0) < 0.15


def test_cluster_replicates_match_a_loop_over_draws():
    rng = np.random.default_rng(1)
    K, Q, draws = 5, 3, 200
    per_traj = [rng.normal(size=(int(rng.integers(1, 4)), Q)) for _ in range(K)]
    per_traj[2][0, 1] = np.nan  # one trajectory lacks quantity 1
    sums = np.stack([np.nansum(x, axis=0) for x in per_traj])
    sizes = np.stack([(~np.isnan(x)).sum(axis=0) for x in per_traj]).astype(float)
    C = bs.configuration_counts(K, draws, seed=3)
    got = bs.cluster_replicates(C, sums, sizes)
    for b in range(draws):
        drawn = np.repeat(np.arange(K), C[b].astype(int))  # the configurations of this draw
        values = np.concatenate([per_traj[k] for k in drawn])
        np.testing.assert_allclose(got[b], np.nanmean(values, axis=0), rtol=1e-12)


def test_question_and_joint_replicates_match_loops():
    rng = np.random.default_rng(2)
    draws, seed = 2 * CHUNK + 37, 11  # more than one chunk
    tasks = {"a": (3, 9), "b": (2, 6)}  # task -> (configurations, questions)
    Q = 2
    utilities, config_index, sizes_rows, traj_d = {}, {}, [], {}
    offset = 0
    for task, (K_t, N) in tasks.items():
        d = {k: rng.normal(size=(int(rng.integers(1, 3)), N, Q)) for k in range(K_t)}  # per traj
        traj_d[task] = d
        utilities[task] = np.stack([d[k].sum(axis=0) for k in range(K_t)])
        config_index[task] = np.arange(offset, offset + K_t)
        sizes_rows += [np.full(Q, float(d[k].shape[0])) for k in range(K_t)]
        offset += K_t
    sizes = np.stack(sizes_rows)
    C = bs.configuration_counts(offset, draws, seed)
    pooled, per_task, joint = bs.question_replicates(utilities, config_index, sizes, C, draws, seed, [0, 1])

    # regenerate each task's question draws exactly as the engine does (same streams, chunks)
    R = {}
    for k, task in enumerate(sorted(tasks)):
        N = tasks[task][1]
        R[task] = np.concatenate(
            [
                bs.resample_counts(N, min(CHUNK, draws - s), np.random.default_rng([seed, 2, k, c]))
                for c, s in enumerate(range(0, draws, CHUNK))
            ]
        )
    J = sizes.sum(axis=0)[0]
    for b in (0, 1, CHUNK + 5, draws - 1):
        # question bootstrap: every trajectory's mean utility over the resampled questions
        total = np.zeros(Q)
        for task in tasks:
            idx = np.repeat(np.arange(tasks[task][1]), R[task][b].astype(int))
            for d in traj_d[task].values():
                total += d[:, idx, :].mean(axis=1).sum(axis=0)
        np.testing.assert_allclose(pooled[b], total / J, rtol=1e-5)
        # joint: resampled configurations, each with the resampled questions of its task
        num, den = np.zeros(Q), 0.0
        for task in tasks:
            idx = np.repeat(np.arange(tasks[task][1]), R[task][b].astype(int))
            for k_local, d in traj_d[task].items():
                mult = C[b, config_index[task][k_local]]
                num += mult * d[:, idx, :].mean(axis=1).sum(axis=0)
                den += mult * d.shape[0]
        np.testing.assert_allclose(joint[b], num / den, rtol=1e-5)
    a_traj = sum(d.shape[0] for d in traj_d["a"].values())
    idx = np.repeat(np.arange(9), R["a"][3].astype(int))
    expect_a = sum(d[:, idx, :].mean(axis=1).sum(axis=0) for d in traj_d["a"].values()) / a_traj
    np.testing.assert_allclose(per_task["a"][3], expect_a, rtol=1e-5)


def test_percentile_interval_ignores_nan_replicates():
    reps = np.column_stack([np.arange(1000.0), np.r_[np.arange(999.0), np.nan]])
    lo, hi = bs.percentile_interval(reps, 0.9)
    assert lo[0] == pytest.approx(np.quantile(np.arange(1000.0), 0.05))
    assert hi[1] == pytest.approx(np.quantile(np.arange(999.0), 0.95))


def test_leave_one_out_means():
    sums = np.array([[2.0], [4.0], [9.0]])
    sizes = np.array([[1.0], [2.0], [3.0]])
    np.testing.assert_allclose(bs.leave_one_out_means(sums, sizes)[:, 0], [13 / 5, 11 / 4, 6 / 3])


def _one_call_counts(n_units, size, draws, rng):
    """The counts of one ``integers`` call for all draws (the resampler before it drew in blocks)."""
    idx = rng.integers(0, n_units, size=(draws, size)) + np.arange(draws)[:, None] * n_units
    return np.bincount(idx.ravel(), minlength=draws * n_units).reshape(draws, n_units)


@pytest.mark.parametrize(
    "n_units, size, draws", [(7, 7, 50), (4000, 4000, 37), (1319, 1319, 111), (500, 200, 333), (3, 70000, 5), (1, 1, 4), (9, 0, 3)]
)
def test_draw_counts_in_blocks_are_the_counts_of_one_call(n_units, size, draws):
    from ckptsel.stats.resample import draw_counts

    a, b = np.random.default_rng([5, 2, 1, 0]), np.random.default_rng([5, 2, 1, 0])
    got = draw_counts(n_units, size, draws, a)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, _one_call_counts(n_units, size, draws, b))
    assert a.random() == b.random()  # the generator is left where one call leaves it
    out = np.empty((draws, n_units), dtype=np.float32)
    assert draw_counts(n_units, size, draws, np.random.default_rng([5, 2, 1, 0]), out=out) is out
    np.testing.assert_array_equal(out, got)


def test_map_chunks_gives_every_chunk_its_own_draws_whatever_the_threads():
    from ckptsel.stats.resample import chunked_counts, map_chunks

    draws, key = 3 * CHUNK + 17, (4, 2, 1)
    expected = np.concatenate([C for _, C in chunked_counts(23, draws, key)])
    for workers in (1, 2, 3):
        got = np.full((draws, 23), np.nan, dtype=np.float32)

        def work(rows, C, got=got):
            got[rows] = C

        map_chunks(work, 23, draws, key, dtype=np.float32, workers=workers)
        np.testing.assert_array_equal(got, expected)
    with pytest.raises(ZeroDivisionError):  # an error in a chunk reaches the caller
        map_chunks(lambda rows, C: 1 / 0, 23, draws, key, workers=2)


def test_percentile_interval_is_np_quantile_bit_for_bit():
    rng = np.random.default_rng(7)
    cases = [
        rng.normal(size=(20000, 5)),
        rng.normal(size=(1000, 3)) * 1e-300,
        np.round(rng.normal(size=(999, 4)), 1),  # many ties
        rng.integers(-3, 4, size=(37, 6)).astype(float),  # ties and (positive) zeros
        rng.normal(size=(1, 3)),
        rng.normal(size=(2, 3)),
        np.array([[1.0, np.inf], [2.0, 5.0], [-np.inf, np.inf], [0.0, 3.0]]),
        np.zeros((50, 2)),
    ]
    for x in cases:
        for level in (0.95, 0.9, 0.5, 0.99, 0.999999, 0.0, 1.0):
            alpha = (1.0 - level) / 2.0
            with np.errstate(invalid="ignore"):
                want = np.quantile(x, [alpha, 1.0 - alpha], axis=0)
                got = np.stack(bs.percentile_interval(x, level))
            np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
            np.testing.assert_array_equal(got, want)
    # a negative zero where a zero is picked: np.quantile's selection order decides the sign
    x = np.array([[0.0, 1.0], [-0.0, 2.0], [0.0, 3.0], [-0.0, 4.0]])
    assert bs.sorted_quantiles(x, [0.25, 0.75]) is None
    want = np.quantile(x, [0.25, 0.75], axis=0)
    got = np.stack(bs.percentile_interval(x, 0.5))
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    x[:, 0] = [np.nan, 1.0, 2.0, 3.0]  # NaN: np.nanquantile
    lo, hi = bs.percentile_interval(x, 0.5)
    np.testing.assert_array_equal(np.stack([lo, hi]), np.nanquantile(x, [0.25, 0.75], axis=0))
