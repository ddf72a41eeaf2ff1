"""Paired comparisons of two checkpoints on the same items: the 2×2 counts and the exact
McNemar test.

* :func:`two_by_two` — both right, only A, only B, both wrong;
* :func:`mcnemar_exact` — the exact (binomial) two-sided McNemar p-value on discordant pairs.
"""

from __future__ import annotations

import math

import numpy as np


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
