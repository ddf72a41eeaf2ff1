"""The one small-design rule, stated once and applied by every verdict ckptsel prints
(``analyze``'s configuration, test-question and joint intervals, ``select``, ``compare``,
``compare-logs``): a result reads *resolved* only when the interval that is reported excludes 0
**and** that interval is valid at this size. Valid means one of two things:

* its coverage was measured near nominal at this many sampling units (:data:`VALID_FROM`, from
  ``benchmarks/bench_coverage.py`` and ``benchmarks/bench_honest.py``; BENCHMARKS.md): the CR2
  configuration interval from 2 configurations, the joint intervals from 3-4 configurations;
  or
* where it was not (fewer units, or a method never measured near nominal, such as the paper's
  percentile configuration bootstrap and the test-question bootstrap, which rejects more than 5%
  of null data sets at every size measured), an **exact test** rejects at ``α = 1 − level``: the
  sign-flip (randomization) test of the units' totals (:func:`sign_flip_p`: configurations'
  gains, test-question clusters' utilities), or for two checkpoints on the same items the exact
  McNemar test and its clustered form (:mod:`ckptsel.stats.paired`), which are the same test on
  integer totals.

There is no bare count of units: with ``m`` units that differ, the smallest two-sided p an exact
test can give is ``2 / 2^m``, so fewer than 6 cannot reject at 95% — that falls out of the test
and is said in the reason, it is not a separate rule.

* :func:`verdict` / :func:`judged` — an :class:`~ckptsel.results.Estimate` as stored, read
  *unresolved* (with the reason) when its interval excludes 0 but the exact test's p is above α;
* :func:`sign_flip_p` — ``(Q,)`` two-sided p-values of ``G`` units' totals, vectorized over
  quantities: exact (all ``2^G`` sign vectors, ``G ≤`` :data:`ENUMERATE_MAX`); beyond, a bound
  of the exact p where it already rejects (Hoeffding, or Berry–Esseen), else Monte-Carlo
  (``(1 + b) / (1 + B)``, valid at any ``B``);
* :func:`interval_estimate` — a point estimate and its interval, clipped to the quantity's range
  (a difference of accuracies to [−100, +100] pp), or *not estimable* with the reason where the
  design gives no information about its variance (fewer units than the method needs, no finite
  interval, zero width around a nonzero mean; an exact 0 with zero width keeps ``[0, 0]``);
* :func:`nonzero_units` — ``m`` per quantity, from the units' totals (for the reasons);
* :func:`clopper_pearson` — the exact (Clopper–Pearson) binomial interval: at ``k = n`` its
  lower bound is ``(α/2)^(1/n)`` (54% at 6 items, 94% at 60), where a normal interval with
  the sample variance has width 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ckptsel.results.estimate import Estimate
from ckptsel.stats.distributions import beta_quantile, norm_cdf

ZERO = 1e-9  # a unit total at most this far from 0 (pp or counts) carries no difference
DIFFERENCE = (-100.0, 100.0)  # the range of a difference of two accuracies, pp

# (family, method) -> the fewest sampling units at which the interval's coverage was measured
# near nominal (BENCHMARKS.md), None where it never was; below it an exact test must reject too.
VALID_FROM: dict[tuple[str, str], int | None] = {
    # 93.2-95.6% at K = 2, 3, 4, 8, 16, 26 in both scenarios of bench_coverage; size 4.2-5.6%
    ("configuration", "cr2"): 2,
    # 87.6-88.0% at K = 3, 90.8-91.4% at K = 4, 91.6-93.6% at K = 8, 92.8-94.2% at K = 16
    ("configuration", "wild"): 16,
    # 48.6-94.0% at K = 2-26 (92.6% at 26 skewed): never near nominal; always the exact test
    ("configuration", "percentile"): None,
    # the test-question percentile bootstrap is a z interval with the plug-in variance: its size
    # under a symmetric null is 5% + O(1/n) (bench_honest: 12.2% at 5 clusters, 6.2% at 20, 5.6%
    # at 60, 5.3% at 200 ± 0.1%), above 5% at every size measured; always the exact test too
    ("question", "percentile"): None,
    # the pigeonhole joint bootstrap: 89.2% at K = 2, 92.4% at K = 3, 94.2-94.4% at K = 4 (500 questions)
    ("joint", "percentile"): 4,
    # the two-way t: 91.8% at K = 2, 93.4% at K = 3 in both scenarios (500 questions)
    ("joint", "twoway"): 3,
}

ENUMERATE_MAX = 16  # up to this many units every sign vector is enumerated (2^16 rows)
SIGN_FLIP_DRAWS = 10_000  # Monte-Carlo sign vectors beyond that, where no bound decides


def valid_at(family: str, method: str, units: np.ndarray | int) -> np.ndarray:
    """Whether the ``family``'s ``method`` interval was measured valid at ``units`` sampling
    units (:data:`VALID_FROM`); ``(Q,)`` bool for ``(Q,)`` units."""
    least = VALID_FROM[(family, method)]
    units = np.asarray(units)
    return np.zeros(units.shape, bool) if least is None else units >= least


def needed_units(level: float) -> int:
    """The fewest nonzero units with which an exact two-sided sign-flip test can reject at
    ``1 − level``: the smallest ``m`` with ``2^(1−m) ≤ 1 − level`` (6 at 95%, 8 at 99%)."""
    alpha = 1.0 - float(level)
    return max(1, math.ceil(1.0 - math.log2(alpha) - 1e-12))


def _percent(level: float) -> str:
    return f"{100 * level:.4g}%"


def plural(n: int, unit: str) -> str:
    """``"1 configuration"``, ``"3 configurations"``."""
    return f"{n} {unit}" + ("" if n == 1 else "s")


def no_interval(mean: float, lo: float, hi: float, units: int | None, unit: str, min_units: int = 2, need: str = "") -> str | None:
    """Why ``(mean, lo, hi)`` over ``units`` sampling units (``unit``, singular; None: unknown)
    has no interval (see :func:`interval_estimate`), None when it has one. ``need``: the
    method's reason for ``min_units``, added when there are 2 or more units but too few."""
    if units is not None and units < min_units:  # one unit: no spread, whatever the method
        return plural(units, unit) + (need if units >= 2 else "")
    if mean == 0.0 and not lo < hi:  # exactly 0 throughout (e.g. the last rule's G): [0, 0]
        return None
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "no finite interval" + ("" if units is None else f" from {plural(units, unit)}")
    if abs(hi - lo) <= 1e-9 * max(1.0, abs(mean)) and mean != 0.0:
        return "no spread across the " + ("units" if units is None else plural(units, unit))
    return None


def interval_estimate(
    mean: float,
    lo: float,
    hi: float,
    units: int | None,
    unit: str,
    min_units: int = 2,
    need: str = "",
    bounds: tuple[float, float] = DIFFERENCE,
) -> Estimate:
    """The estimate as stored: its interval clipped to ``bounds`` (the quantity's range; a
    difference of accuracies by default), or not estimable with :func:`no_interval`'s reason;
    ``[0, 0]`` when it is exactly 0 without spread."""
    why = no_interval(mean, lo, hi, units, unit, min_units, need)
    if why is not None:
        return Estimate.without_interval(mean, why)
    if mean == 0.0 and not lo < hi:
        return Estimate.rounded(0.0, 0.0, 0.0)
    return Estimate.rounded(mean, *np.clip([lo, hi], *bounds).tolist())


def exact_reason(p: float, level: float, test: str, units: int | None = None, unit: str = "") -> str | None:
    """Why an interval beside an exact test's p-value ``p`` must not read resolved at ``level``
    (None when ``p ≤ 1 − level``); with ``units`` that differ (``unit``: what one is), fewer than
    an exact test can reject with are named."""
    alpha = 1.0 - level
    if p <= alpha + 1e-12:  # (a NaN p never rejects)
        return None
    why = f"{test}'s p = {p:.3g} > {alpha:.3g}"
    need = needed_units(level)
    if units is not None and units < need:
        why += f" ({plural(units, unit)}: an exact {_percent(level)} test cannot reject with fewer than {need})"
    return why


def judged(e: Estimate, level: float, p: float | None, test: str = "the exact test", units: int | None = None, unit: str = "") -> Estimate:
    """``e`` (as stored), read *unresolved* with the reason when its interval excludes 0 but the
    exact test's p-value ``p`` is above ``1 − level`` (:func:`exact_reason`); ``p`` None: the
    interval is valid at this size and decides alone. An estimate that reads unresolved already
    is returned unchanged."""
    e = e.as_stored()
    if e.unresolved or p is None:
        return e
    why = exact_reason(float(p), level, test, units, unit)
    return e if why is None else e.cannot_be_resolved(why)


def verdict(
    e: Estimate, level: float, valid: bool, p: Callable[[], float], test: str, why_invalid: str, units: int | None = None, unit: str = ""
) -> Estimate:
    """The one rule (module docstring): ``e`` as stored when its interval is ``valid`` at this
    size or reads unresolved anyway; else judged by the exact test's p-value (``p()``, computed
    only then), the reason saying why the interval alone could not decide (``why_invalid``)."""
    e = e.as_stored()
    if valid or e.unresolved:
        return e
    why = exact_reason(float(p()), level, test, units, unit)
    return e if why is None else e.cannot_be_resolved(f"{why_invalid}, and {why}")


BERRY_ESSEEN = 0.5600  # Shevtsova (2010)'s constant for sums of independent, not identical, terms


def _bounds(observed: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(Q,)`` lower and upper bounds of the exact two-sided sign-flip p-value of ``S`` =
    ``observed`` from the ``(G, Q)`` totals ``t``: Hoeffding's ``2 exp(−S² / (2V))`` and the
    normal tail ``2 (1 − Φ(S / √V))`` ∓ twice the Berry–Esseen error ``C Σ|t|³ / V^{3/2}``
    (``V = Σ t²``, the variance of ``Σ ε_g t_g``)."""
    var = (t * t).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = observed / np.sqrt(var)
        hoeffding = 2.0 * np.exp(-0.5 * z * z)
        error = 2.0 * BERRY_ESSEEN * (np.abs(t) ** 3).sum(axis=0) / var**1.5
    tail = 2.0 * norm_cdf(-z)
    return np.clip(tail - error, 0.0, 1.0), np.minimum(np.minimum(hoeffding, tail + error), 1.0)


def sign_flip_p(
    totals: np.ndarray, rng: Callable[[], np.random.Generator], draws: int = SIGN_FLIP_DRAWS, level: float | None = None
) -> np.ndarray:
    """``(Q,)`` two-sided p-values ``P(|Σ ε_g t_g| ≥ |Σ t_g|)`` of the sign-flip test of the
    ``(G, Q)`` unit totals ``t`` (NaN counts as 0), each ``ε_g`` an independent fair sign: exact
    for symmetric unit totals under the null, whatever their spread. Every sign vector when ``G
    ≤`` :data:`ENUMERATE_MAX` (exact). Beyond, each p-value is a valid one: with ``level`` given,
    where a bound of the exact p (Hoeffding's, or the normal tail plus the Berry–Esseen error;
    :func:`_bounds`) already rejects at ``1 − level``, that bound (no draws needed); else
    ``draws`` random sign vectors from ``rng()`` and the Monte-Carlo p-value ``(1 + b) / (1 +
    draws)``, itself an exact level-α test. 1 where every total is 0."""
    t = np.nan_to_num(np.asarray(totals, dtype=np.float64))
    G, Q = t.shape
    if Q == 0 or G == 0:
        return np.ones(Q)
    total = t.sum(axis=0)
    observed, scale = np.abs(total), np.abs(t).sum(axis=0)  # (Q,)
    tol = 1e-9 * np.maximum(1.0, scale)  # ties of float sums count as ties
    if G <= ENUMERATE_MAX:
        signs = 1.0 - 2.0 * ((np.arange(2**G)[:, None] >> np.arange(G)) & 1)  # (2^G, G)
        p = (np.abs(signs @ t) >= observed - tol).mean(axis=0)
    else:
        p = _bounds(observed, t)[1]
        todo = np.flatnonzero(~(p <= 1.0 - level + 1e-12)) if level is not None else np.arange(Q)
        if len(todo):
            gen, hits, sub = rng(), np.zeros(len(todo)), t[:, todo]
            for start in range(0, draws, 500):  # (rows, G) signs at a time: bit b flips unit g
                rows = min(500, draws - start)
                bits = np.unpackbits(np.frombuffer(gen.bytes(rows * ((G + 7) // 8)), np.uint8).reshape(rows, -1), axis=1, count=G)
                flipped = total[todo] - 2.0 * (bits.astype(np.float64) @ sub)  # (rows, len(todo))
                hits += (np.abs(flipped) >= observed[todo] - tol[todo]).sum(axis=0)
            p[todo] = (1.0 + hits) / (1.0 + draws)
    return np.where(scale > ZERO, np.minimum(p, 1.0), 1.0)


def nonzero_units(totals: np.ndarray, present: np.ndarray | None = None) -> np.ndarray:
    """``(Q,)`` how many of the ``(G, Q)`` unit totals are nonzero (beyond :data:`ZERO`), among
    the ``present`` ones (all when None)."""
    nz = np.abs(np.nan_to_num(np.asarray(totals, dtype=np.float64))) > ZERO
    if present is not None:
        nz &= np.asarray(present, dtype=bool)
    return nz.sum(axis=0)


def clopper_pearson(k: float, n: int, level: float) -> tuple[float, float]:
    """The exact two-sided binomial interval for ``k`` successes in ``n`` trials (as
    proportions): ``[B(α/2; k, n−k+1), B(1−α/2; k+1, n−k)]``, 0 / 1 at the boundaries. ``k``
    may be fractional (a sum of ``n`` cluster means in [0, 1], whose sum the binomial bounds
    conservatively)."""
    alpha = 1.0 - level
    k = min(max(float(k), 0.0), float(n))
    if k >= n:  # closed forms at the boundaries
        lo = (alpha / 2) ** (1.0 / n)
    else:
        lo = 0.0 if k <= 0 else beta_quantile(alpha / 2, k, n - k + 1)
    if k <= 0:
        hi = 1.0 - (alpha / 2) ** (1.0 / n)
    else:
        hi = 1.0 if k >= n else beta_quantile(1 - alpha / 2, k + 1, n - k)
    return lo, hi
