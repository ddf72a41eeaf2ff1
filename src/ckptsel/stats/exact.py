"""What a small design can say: the one rule for when an interval may read *resolved*, and an
interval for a proportion that stays valid at 0 and 100%.

* :func:`needed_units` — how many sampling units that carry a nonzero difference (discordant
  items, discordant clusters, configurations with a nonzero gain) an exact test needs before
  it can reject at a level. With ``m`` of them, the smallest two-sided p-value of a test that
  is exact without distributional assumptions (the exact McNemar test, its clustered sign-flip
  form, the sign-flip test of configuration means) is ``2 / 2^m``, reached when every unit
  points the same way; it rejects at ``α = 1 − level`` only when ``2^(1−m) ≤ α``: 6 units at
  95%, 8 at 99%. Units whose difference is exactly 0 carry no information for such a test.
* :func:`interval_estimate` — a point estimate and its interval as an
  :class:`~ckptsel.results.Estimate`, or *not estimable* with the reason where the design gives
  no information about its variance: fewer sampling units than the method needs, no finite
  interval, or an interval of zero width around a nonzero mean (an estimate that is exactly 0
  with zero width keeps ``[0, 0]``, which reads unresolved);
* :func:`cannot_resolve` — why an interval over ``m`` such units (or one beside an exact p-value
  above α) must not read resolved, None when it may; :func:`judged` applies it to an
  :class:`~ckptsel.results.Estimate` (an interval that would read resolved reads *unresolved*,
  with the reason; anything else is returned as it is). Every verdict ckptsel prints
  (``compare``, ``select``, ``analyze``) goes through it.
* :func:`nonzero_units` — ``m`` per quantity, from the units' totals.
* :func:`clopper_pearson` — the exact (Clopper–Pearson) binomial interval: at ``k = n`` its
  lower bound is ``(α/2)^(1/n)`` (54% at 6 items, 94% at 60), where a normal interval with
  the sample variance has width 0.
"""

from __future__ import annotations

import math

import numpy as np

from ckptsel.results import Estimate
from ckptsel.stats.distributions import beta_quantile

ZERO = 1e-9  # a unit total at most this far from 0 (pp or counts) carries no difference


def needed_units(level: float) -> int:
    """The fewest nonzero units with which an exact two-sided test can reject at ``1 − level``:
    the smallest ``m`` with ``2^(1−m) ≤ 1 − level``."""
    alpha = 1.0 - float(level)
    return max(1, math.ceil(1.0 - math.log2(alpha) - 1e-12))


def _percent(level: float) -> str:
    return f"{100 * level:.4g}%"


def plural(n: int, unit: str) -> str:
    """``"1 configuration"``, ``"3 configurations"``."""
    return f"{n} {unit}" + ("" if n == 1 else "s")


def no_interval(mean: float, lo: float, hi: float, units: int | None, unit: str, min_units: int = 2,
                need: str = "") -> str | None:  # fmt: skip
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


def interval_estimate(mean: float, lo: float, hi: float, units: int | None, unit: str,
                      min_units: int = 2, need: str = "") -> Estimate:  # fmt: skip
    """The estimate as stored: its interval, or not estimable with :func:`no_interval`'s reason;
    ``[0, 0]`` when it is exactly 0 without spread."""
    why = no_interval(mean, lo, hi, units, unit, min_units, need)
    if why is not None:
        return Estimate.without_interval(mean, why)
    if mean == 0.0 and not lo < hi:
        return Estimate.rounded(0.0, 0.0, 0.0)
    return Estimate.rounded(mean, lo, hi)


def cannot_resolve(units: int, level: float, unit: str, p: float | None = None) -> str | None:
    """Why an interval over ``units`` nonzero sampling units (``unit``: what one is, e.g.
    ``"discordant item"``) cannot read resolved at ``level`` (None when it can); with an exact
    test's p-value ``p``, also when ``p`` is above ``1 − level``."""
    need = needed_units(level)
    if units < need:
        return f"{plural(units, unit)}, and an exact {_percent(level)} test needs {need}"
    alpha = 1.0 - level
    if p is not None and p > alpha + 1e-12:
        return f"the exact test's p = {p:.3g} > {alpha:.3g}"
    return None


def judged(e: Estimate, units: int, level: float, unit: str, p: float | None = None) -> Estimate:
    """``e`` (as stored), read *unresolved* with the reason when :func:`cannot_resolve` says it
    cannot be resolved; an estimate that reads unresolved already is returned unchanged."""
    e = e.as_stored()
    if e.unresolved:
        return e
    why = cannot_resolve(int(units), level, unit, p)
    return e if why is None else e.cannot_be_resolved(why)


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
