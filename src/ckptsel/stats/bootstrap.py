"""Bootstrap replicates as matrix products (SPEC §8): no Python loop over draws.

* configuration bootstrap: a counts matrix ``C`` (draws × configurations) times the
  per-configuration sums; the replicate is a trajectory-weighted mean. Estimand: the mean gain
  over a population of configurations, **conditional on the observed test items**;
* test-question bootstrap: a counts matrix ``R`` (draws × questions) per task times the
  per-question utilities, with frozen choices held fixed. Estimand: the gain over a population
  of test questions, **conditional on the observed trajectories and their frozen choices**;
* joint: both at once, sharing the same ``C`` and ``R`` (the "pigeonhole" bootstrap of a
  crossed configurations × questions design). Estimand: the superpopulation mean (both
  sources). Stacking the two resamplings counts the interaction variance about three times;
  :func:`ckptsel.stats.intervals.twoway_variance` corrects that (Owen 2007).
The percentile intervals here are the paper's method (``--interval percentile``); the other
methods live in :mod:`ckptsel.stats.intervals`.
Draw matrices come from the one clustered resampler (:mod:`ckptsel.stats.resample`), in
fixed-size chunks so memory stays bounded; chunk ``c`` of task ``k`` always comes from the same
generator (:data:`ckptsel._util.rng.QUESTION_DRAWS`), so every quantity sees the same resamples.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ckptsel._util import rng as streams
from ckptsel.stats.resample import Clusters, map_chunks, resample_counts


def configuration_counts(n_configurations: int, draws: int, seed: int, stream: int = 0) -> np.ndarray:
    """The configuration-draw matrix shared by every quantity (and by the joint bootstrap)."""
    gen = streams.generator(seed, streams.CONFIGURATION_DRAWS, stream)
    return resample_counts(n_configurations, draws, gen)


def cluster_replicates(counts: np.ndarray, sums: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """``(draws, Q)`` replicate means: ``(C @ sums) / (C @ sizes)``.

    ``sums[k, q]`` is the total of quantity q over configuration k's trajectories and
    ``sizes[k, q]`` how many of them have it (seeds stay together); a replicate with no
    trajectory for q is NaN.
    """
    num = counts @ sums
    # most quantities are present for the same trajectories: one product per distinct column
    uniq, inverse = np.unique(sizes, axis=1, return_inverse=True)
    den = (counts @ uniq)[:, inverse.ravel()]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def question_replicates(
    utilities: dict[str, np.ndarray],
    config_index: dict[str, np.ndarray],
    sizes: np.ndarray,
    config_counts: np.ndarray | None,
    draws: int,
    seed: int,
    joint_columns: Sequence[int] = (),
    groups: dict[str, np.ndarray] | None = None,
) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray | None]:
    """Test-question (and joint) bootstrap replicates.

    ``utilities[task]`` is ``(K_task, N_task, Q)``: per-configuration sums over trajectories
    of ``d_i = 100 w·z_i``. ``config_index[task]`` gives those configurations' rows in
    ``sizes`` (``(K, Q)`` trajectory counts) and in ``config_counts`` (``(draws, K)``).
    ``groups[task]`` (``(N_task,)``, optional) clusters the questions: items that share a
    group are drawn as one unit (``G_task`` clusters drawn ``G_task`` times; a replicate is the
    resampled sum over the resampled number of items). With single-item groups (or no
    ``groups``) this is the plain question bootstrap, bit for bit.
    Returns pooled question replicates ``(draws, Q)``, the per-task replicates, and the joint
    replicates ``(draws, len(joint_columns))`` (None without ``config_counts``).
    """
    tasks = sorted(utilities)
    total = sizes.sum(axis=0)  # trajectories per quantity, fixed weights
    q = sizes.shape[1]
    pooled = np.zeros((draws, q))
    per_task = {}
    joint_cols = np.asarray(joint_columns, dtype=np.int64)
    joint_num = np.zeros((draws, len(joint_cols)))
    for k, task in enumerate(tasks):
        task_size = sizes[config_index[task]].sum(axis=0)
        task_counts = None  # (draws, K_task) configuration counts of the joint bootstrap
        if config_counts is not None and len(joint_cols):
            task_counts = config_counts[:, config_index[task]]
        task_reps = _task_replicates(
            utilities[task],
            groups.get(task) if groups else None,
            task_counts,
            joint_cols,
            joint_num,
            draws,
            (seed, streams.QUESTION_DRAWS, k),
        )
        pooled += task_reps
        with np.errstate(invalid="ignore", divide="ignore"):
            per_task[task] = task_reps / np.where(task_size > 0, task_size, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        pooled /= np.where(total > 0, total, np.nan)
    joint = None
    if config_counts is not None and len(joint_cols):
        den = config_counts @ sizes[:, joint_cols]
        with np.errstate(invalid="ignore", divide="ignore"):
            joint = np.where(den > 0, joint_num / np.where(den > 0, den, 1.0), np.nan)
    return pooled, per_task, joint


def _task_replicates(
    util: np.ndarray,
    groups: np.ndarray | None,
    task_counts: np.ndarray | None,
    joint_cols: np.ndarray,
    joint_num: np.ndarray,
    draws: int,
    key: tuple[int, ...],
) -> np.ndarray:
    """``(draws, Q)`` resampled utility sums of one task (``util`` ``(K_task, N_task, Q)``) over
    the items drawn; adds the task's joint numerators to ``joint_num`` ``(draws, J)`` when
    ``task_counts`` (``(draws, K_task)``) is given. Chunks run on a few threads (each writes only
    its own rows, so the result does not depend on the threads)."""
    n_conf, n_items, q = util.shape
    # products in float32: the counts are exact, the utilities carry ~7 significant digits,
    # far below the Monte Carlo error of the percentiles; sums are kept in float64
    task_sum = util.sum(axis=0).astype(np.float32)  # (N, Q)
    task_reps = np.zeros((draws, q))
    joint_util = util[:, :, joint_cols].transpose(1, 0, 2).reshape(n_items, -1).astype(np.float32)
    clusters = Clusters.of(groups, n_items)
    unit_sizes = None
    if clusters.count < n_items:  # clusters: sum utilities per cluster, divide by items drawn
        task_sum = clusters.sums(task_sum).astype(np.float32)
        joint_util = clusters.sums(joint_util).astype(np.float32)
        unit_sizes = clusters.sizes.astype(np.float32)

    def chunk(rows: slice, R: np.ndarray) -> None:  # R: (rows, G) float32 counts (exact)
        drawn = n_items if unit_sizes is None else (R @ unit_sizes)[:, None]  # items per draw
        task_reps[rows] = (R @ task_sum) / drawn
        if task_counts is not None:
            per_conf = ((R @ joint_util) / drawn).reshape(R.shape[0], n_conf, len(joint_cols))
            joint_num[rows] += np.einsum("bk,bkq->bq", task_counts[rows], per_conf)

    map_chunks(chunk, clusters.count, draws, key, dtype=np.float32)
    return task_reps


def percentile_interval(replicates: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval per column, ignoring NaN replicates.

    Exactly ``np.quantile(replicates, [α, 1 − α], axis=0)`` (``np.nanquantile`` with NaN); for
    ``(draws, Q)`` replicates without NaN the two order statistics come from sorted columns
    (:func:`sorted_quantiles`), which is faster than numpy's partition along axis 0.
    """
    alpha = (1.0 - level) / 2.0
    probs = [alpha, 1.0 - alpha]
    if np.isnan(replicates).any():
        # all-NaN columns are left NaN here rather than by silencing numpy's warning: a
        # catch_warnings block is not thread-safe (a caller may run other analyses on threads)
        flat = replicates.reshape(replicates.shape[0], -1)
        some = ~np.isnan(flat).all(axis=0)
        out = np.full((2, flat.shape[1]), np.nan)
        if some.any():
            out[:, some] = np.nanquantile(flat[:, some], probs, axis=0)
        return out[0].reshape(replicates.shape[1:]), out[1].reshape(replicates.shape[1:])
    if replicates.ndim == 2 and replicates.shape[0] > 0:
        bounds = sorted_quantiles(replicates, probs)
        if bounds is not None:
            return bounds[0], bounds[1]
    lo, hi = np.quantile(replicates, probs, axis=0)
    return lo, hi


def sorted_quantiles(values: np.ndarray, probs: Sequence[float]) -> np.ndarray | None:
    """``(len(probs), Q)`` quantiles of the columns of ``values`` (``(n, Q)``, no NaN), bit for bit
    those of ``np.quantile(values, probs, axis=0)`` (method "linear": its indices, weights and
    interpolation, read off sorted columns), or None where that cannot be promised.

    Equal values are the same bits, so any order of them gives the same quantile, except -0.0
    and 0.0, which compare equal: where a column holds a negative zero and a zero is picked,
    np.quantile's own selection order decides the sign, so this returns None (use np.quantile).
    """
    n = values.shape[0]
    ordered = values.T.copy()  # (Q, n), rows contiguous: a row sort is fast
    ordered.sort(axis=1)
    q = np.asanyarray(probs, dtype=np.float64)
    virtual = (n - 1) * q  # numpy's linear method: virtual index, neighbours, weight
    prev = np.floor(virtual)
    nxt = prev + 1
    prev[virtual >= n - 1], nxt[virtual >= n - 1] = -1, -1
    prev[virtual < 0], nxt[virtual < 0] = 0, 0
    prev, nxt = prev.astype(np.intp), nxt.astype(np.intp)
    gamma = np.asanyarray(virtual - prev, dtype=virtual.dtype)[:, None]  # (P, 1)
    a, b = ordered[:, prev].T, ordered[:, nxt].T  # (P, Q)
    zero = ((a == 0) | (b == 0)).any(axis=0)
    if zero.any():
        rows = ordered[zero]
        if (np.signbit(rows) & (rows == 0)).any():
            return None
    diff = b - a  # numpy's _lerp
    out = np.add(a, diff * gamma)
    np.subtract(b, diff * (1 - gamma), out=out, where=np.broadcast_to(gamma >= 0.5, out.shape))
    return out


def leave_one_out_means(sums: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """``(K, Q)`` trajectory-weighted means with each configuration left out in turn."""
    num = sums.sum(axis=0, keepdims=True) - sums
    den = sizes.sum(axis=0, keepdims=True) - sizes
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
