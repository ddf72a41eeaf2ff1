"""Paired comparisons of two checkpoints on the same items: the 2×2 counts and the McNemar
test, exact for independent items and clustered for items that come in groups.

* :func:`two_by_two` — both right, only A, only B, both wrong;
* :func:`mcnemar_exact` — the exact (binomial) two-sided McNemar p-value on discordant pairs;
* :func:`clustered_mcnemar` — the McNemar test for clustered items: the exact sign-flip
  (randomization) test of ``S = Σ_k d_k``, ``d_k`` = (only A) − (only B) in cluster ``k``. Under
  the null that A and B are exchangeable within each cluster, every cluster's ``d_k`` is as
  likely to have either sign, so flipping whole clusters gives the null distribution of ``S``
  (computed exactly, no draws); its statistic ``S² / Σ d_k²`` is Durkalski et al. (2003)'s
  clustered McNemar (the denominator does not change under the flips). With single-item
  clusters it is the exact McNemar test (flips of ``±1`` are the binomial). The plain McNemar
  test on grouped items treats correlated items as independent and rejects a true null far
  too often (BENCHMARKS.md, ``bench_stat_fixes``);
* :func:`adjust_pvalues` — several such tests at once (one per task): Holm's step-down
  adjustment (family-wise error) or Benjamini–Hochberg's step-up one (false discovery rate).
"""

from __future__ import annotations

import math

import numpy as np

from ckptsel.stats.distributions import norm_ppf
from ckptsel.stats.resample import cluster_codes


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


def cluster_differences(a: np.ndarray, b: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """``(G,)`` per-cluster (only A right) − (only B right) counts, clusters by first appearance."""
    a, b = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    codes, count = cluster_codes(groups)
    return np.bincount(codes, weights=(a & ~b).astype(np.float64) - (~a & b), minlength=count)


def _binomial_pmf(m: int) -> np.ndarray:
    """``(m + 1,)`` pmf of Binomial(m, 1/2) (log-space, no overflow)."""
    j = np.arange(1, m + 1, dtype=np.float64)
    log_comb = np.concatenate([[0.0], np.cumsum(np.log(m - j + 1.0) - np.log(j))])
    return np.exp(log_comb - m * math.log(2.0))


def clustered_mcnemar(a: np.ndarray, b: np.ndarray, groups: np.ndarray) -> float:
    """Two-sided p-value ``P(|S*| ≥ |S|)`` of the clustered McNemar test (module docstring),
    exact: ``S*`` flips the sign of every cluster's ``d_k`` independently, and the clusters with
    the same ``|d_k| = v`` (``m_v`` of them) add ``v (2 Bin(m_v, 1/2) − m_v)``; one convolution
    per distinct ``|d_k|`` (at most the largest group's size). 1 when every ``d_k`` is 0."""
    d = cluster_differences(a, b, groups)
    v = np.abs(d[d != 0]).astype(np.int64)
    if len(v) == 0:
        return 1.0
    observed, total = abs(int(round(d.sum()))), int(v.sum())
    values, counts = np.unique(v, return_counts=True)
    pmf = np.ones(1)  # distribution of S* + total on 0, 1, ..., 2 total
    for value, m in zip(values.tolist(), counts.tolist(), strict=True):  # distinct |d_k| only
        step = np.zeros(2 * value * m + 1)
        step[:: 2 * value] = _binomial_pmf(m)
        pmf = np.convolve(pmf, step)
    s = np.arange(len(pmf)) - total
    return float(min(1.0, pmf[np.abs(s) >= observed].sum()))


ADJUSTMENTS = ("holm", "bh")


def adjust_pvalues(p: np.ndarray, method: str = "holm") -> np.ndarray:
    """``(m,)`` adjusted p-values of ``m`` tests, in their order (reject where ≤ α).

    With ``p_(1) ≤ … ≤ p_(m)`` sorted: Holm (1979) ``p̃_(i) = max_{j≤i} min(1, (m − j + 1) p_(j))``
    controls the family-wise error; Benjamini–Hochberg (1995)
    ``p̃_(i) = min_{j≥i} min(1, m p_(j) / j)`` controls the false discovery rate (independent or
    positively dependent tests). One test: its own p-value.
    """
    p = np.asarray(p, dtype=np.float64)
    if method not in ADJUSTMENTS:
        raise ValueError(f"unknown adjustment {method!r}: use one of {ADJUSTMENTS}")
    m = len(p)
    if m == 0:
        return p.copy()
    order = np.argsort(p, kind="stable")
    rank = np.arange(1, m + 1, dtype=np.float64)  # (m,) 1-based rank of each sorted p
    ps = p[order]
    if method == "holm":
        adj = np.maximum.accumulate(np.minimum(1.0, (m - rank + 1.0) * ps))
    else:
        adj = np.minimum.accumulate(np.minimum(1.0, m * ps / rank)[::-1])[::-1]
    out = np.empty(m)
    out[order] = adj
    return out


def _wilson(k: float, n: int, z: float) -> tuple[float, float]:
    """The Wilson score interval of the proportion ``k / n`` (as proportions)."""
    p, z2 = k / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def newcombe_paired(table: dict[str, int], level: float) -> tuple[float, float]:
    """The score-type interval (Newcombe 1998, method 10) of the paired difference of two
    accuracies ``(only_a − only_b) / n`` from the 2×2 ``table`` (:func:`two_by_two`), as a
    proportion in [−1, 1]: each accuracy's Wilson interval, combined with the phi correlation
    of the pairs (0 when a margin is empty). Unlike a bootstrap of the differences it has width
    at every table (A right and B wrong on every item included) and keeps its level at small
    ``n`` (coverage ≥ 80% from 3 items where the percentile bootstrap gives 57–74%)."""
    a, b, c, d = (table[k] for k in ("both_correct", "only_a", "only_b", "both_wrong"))
    n = a + b + c + d
    if n == 0:
        return math.nan, math.nan
    z = float(norm_ppf(np.array(1.0 - (1.0 - level) / 2.0)))
    p1, p2 = (a + b) / n, (a + c) / n
    l1, u1 = _wilson(a + b, n, z)
    l2, u2 = _wilson(a + c, n, z)
    margins = (a + b) * (c + d) * (a + c) * (b + d)
    cross = a * d - b * c
    phi = 0.0 if margins == 0 or 0 <= cross <= n / 2 else (cross - n / 2 * (cross > 0)) / math.sqrt(margins)
    delta = p1 - p2
    dl = math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    du = math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    return max(-1.0, delta - dl), min(1.0, delta + du)
