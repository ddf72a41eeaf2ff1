"""Paired comparisons and clustered question resampling (pure NumPy, no loops over draws or items).

* :func:`cluster_codes` — items that share a ``group`` form one cluster; codes by first
  appearance in item order, so single-item groups get codes ``0..n-1`` in item order;
* :func:`draw_counts` — ``(draws, G)`` multiplicities of ``size`` units drawn with replacement
  from ``G`` (with ``size == G`` it is exactly :func:`ckptsel.analysis.bootstrap.resample_counts`
  on the same generator);
* :func:`clustered_means` — bootstrap replicates of per-item means where whole clusters are
  resampled (ratio of resampled sums to resampled sizes); with single-item clusters they equal
  the plain question bootstrap ``R @ d / n`` exactly;
* :func:`mcnemar_exact` — the exact (binomial) two-sided McNemar p-value on discordant pairs;
* :func:`two_by_two` — the paired 2×2 counts.

Shapes: ``n`` items, ``G`` clusters, ``Q`` quantities, ``draws`` bootstrap draws.
"""

from __future__ import annotations

import math

import numpy as np

from ckptsel.analysis.bootstrap import CHUNK, resample_counts


def cluster_codes(groups: np.ndarray) -> tuple[np.ndarray, int]:
    """``(n,)`` cluster code of each item (first appearance order) and the number of clusters."""
    groups = np.asarray(groups)
    if len(groups) == 0:
        return np.zeros(0, dtype=np.int64), 0
    _, first, inverse = np.unique(groups, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    return rank[inverse.ravel()], len(first)


def draw_counts(n_units: int, size: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    """``(draws, n_units)`` multiplicities of ``size`` units drawn uniformly with replacement."""
    if size == n_units:
        return resample_counts(n_units, draws, rng)
    idx = rng.integers(0, n_units, size=(draws, size))
    idx += np.arange(draws)[:, None] * n_units
    return (
        np.bincount(idx.ravel(), minlength=draws * n_units)
        .reshape(draws, n_units)
        .astype(np.float64)
    )


def cluster_sums(values: np.ndarray, codes: np.ndarray, n_clusters: int) -> np.ndarray:
    """``(G, ...)`` sums of ``values`` (``(n, ...)``) over the items of each cluster."""
    values = np.asarray(values, dtype=np.float64)
    out = np.zeros((n_clusters,) + values.shape[1:])
    np.add.at(out, codes, values)
    return out


def clustered_means(
    values: np.ndarray, groups: np.ndarray, draws: int, seed: int, stream: int = 0
) -> np.ndarray:
    """``(draws, Q)`` bootstrap replicates of the item means of ``values`` (``(n, Q)``).

    Whole clusters (items sharing a group) are drawn with replacement, as many as there are
    clusters; a replicate is (resampled sum) / (resampled number of items). Draws come in
    chunks of :data:`CHUNK`, chunk ``c`` from ``default_rng([seed, 8, stream, c])``.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 1:
        values = values[:, None]
    codes, G = cluster_codes(groups)
    sums = cluster_sums(values, codes, G)  # (G, Q)
    sizes = np.bincount(codes, minlength=G).astype(np.float64)  # (G,)
    out = np.empty((draws, values.shape[1]))
    for c, start in enumerate(range(0, draws, CHUNK)):
        stop = min(draws, start + CHUNK)
        C = resample_counts(G, stop - start, np.random.default_rng([seed, 8, stream, c]))
        out[start:stop] = (C @ sums) / (C @ sizes)[:, None]
    return out


def two_by_two(a: np.ndarray, b: np.ndarray) -> dict[str, int]:
    """Paired counts of two boolean vectors: both right, only A, only B, both wrong."""
    a, b = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    return {
        "both_correct": int((a & b).sum()),
        "only_a": int((a & ~b).sum()),
        "only_b": int((~a & b).sum()),
        "both_wrong": int((~a & ~b).sum()),
    }


def binomial_tail_log(k: int, n: int) -> float:
    """``log P(X <= k)`` for ``X ~ Binomial(n, 1/2)`` (log-space sum, vectorized over 0..k)."""
    if k < 0:
        return -math.inf
    if k >= n:
        return 0.0
    j = np.arange(1, k + 1, dtype=np.float64)
    # log C(n, j) by the running ratio C(n, j) / C(n, j-1) = (n - j + 1) / j
    log_comb = np.concatenate([[0.0], np.cumsum(np.log(n - j + 1.0) - np.log(j))])
    log_pmf = log_comb - n * math.log(2.0)
    top = log_pmf.max()
    return float(top + math.log(np.exp(log_pmf - top).sum()))


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Exact two-sided McNemar p-value: ``min(1, 2 P(X <= min(b, c)))``, ``X ~ Bin(b + c, 1/2)``.

    Only the discordant pairs carry information; with none the p-value is 1.
    """
    if only_a < 0 or only_b < 0:
        raise ValueError("discordant counts must be >= 0")
    n = only_a + only_b
    if n == 0:
        return 1.0
    return float(min(1.0, 2.0 * math.exp(binomial_tail_log(min(only_a, only_b), n))))
