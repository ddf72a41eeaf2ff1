"""Normal and Student-t distribution functions without SciPy, vectorized.

* :func:`norm_cdf`, :func:`norm_ppf` — the standard normal CDF and its inverse;
* :func:`t_quantile` — Student-t quantiles for real degrees of freedom (Newton on the exact CDF
  for small df, Cornish–Fisher above);
* :func:`beta_quantile` — quantiles of the Beta distribution (bisection on the exact CDF), for
  the Clopper–Pearson bounds of :mod:`~ckptsel.stats.exact`.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np


def _betainc(a: np.ndarray, b: float, x: np.ndarray) -> np.ndarray:
    """Regularized incomplete beta I_x(a, b), elementwise (Lentz continued fraction)."""
    lgam = np.vectorize(math.lgamma, otypes=[float])
    flip = x > (a + 1.0) / (a + b + 2.0)
    aa_, bb_ = np.where(flip, b, a), np.where(flip, a, b)
    xx = np.where(flip, 1.0 - x, x)
    tiny = 1e-300
    with np.errstate(divide="ignore", invalid="ignore"):
        front = np.exp(lgam(aa_ + bb_) - lgam(aa_) - lgam(bb_) + aa_ * np.log(xx) + bb_ * np.log1p(-xx))
    c = np.ones_like(xx)
    d = 1.0 - (aa_ + bb_) * xx / (aa_ + 1.0)
    d = 1.0 / np.where(np.abs(d) < tiny, tiny, d)
    h = d.copy()
    for m in range(1, 201):
        for num in (
            m * (bb_ - m) * xx / ((aa_ - 1.0 + 2 * m) * (aa_ + 2 * m)),
            -(aa_ + m) * (aa_ + bb_ + m) * xx / ((aa_ + 2 * m) * (aa_ + 1.0 + 2 * m)),
        ):
            d = 1.0 + num * d
            d = 1.0 / np.where(np.abs(d) < tiny, tiny, d)
            c = 1.0 + num / c
            c = np.where(np.abs(c) < tiny, tiny, c)
            h = h * d * c
        if np.all(np.abs(d * c - 1.0) < 1e-15):
            break
    value = front * h / aa_
    return np.where(flip, 1.0 - value, value)


def beta_quantile(p: float, a: float, b: float) -> float:
    """The ``p`` quantile of Beta(``a``, ``b``) (``a, b > 0``): bisection on the exact CDF
    ``I_x(a, b)`` to 1e-13."""
    lo, hi = 0.0, 1.0
    for _ in range(50):
        mid = (lo + hi) / 2
        if float(_betainc(np.array([float(a)]), float(b), np.array([mid]))[0]) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


_T_CACHE: dict[tuple[float, float], float] = {}


def t_quantile(p: float, df: np.ndarray) -> np.ndarray:
    """Student-t quantile for ``p > 0.5`` and real ``df > 0`` (no SciPy dependency).

    For df <= 60, Newton's method on the exact CDF 1 − ½ I_{df/(df+q²)}(df/2, ½) started at the
    normal quantile (the CDF is concave there, so the iterates rise monotonically to the root);
    above, the Cornish–Fisher expansion to order df⁻⁴ (error < 1e-9). Distinct df values only.
    """
    df = np.asarray(df, dtype=np.float64)
    uniq, inverse = np.unique(df, return_inverse=True)
    cached = [_T_CACHE.get((p, x)) for x in uniq.tolist()]
    if all(c is not None for c in cached):
        return np.array(cached)[inverse.ravel()].reshape(df.shape)
    z = NormalDist().inv_cdf(p)
    nu = uniq
    out = z + (z**3 + z) / (4 * nu) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * nu**2)
    out += (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * nu**3)
    out += (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * nu**4)
    small = uniq <= 60
    if small.any():
        nu = uniq[small]
        lgam = np.vectorize(math.lgamma, otypes=[float])
        const = np.exp(lgam((nu + 1) / 2) - lgam(nu / 2)) / np.sqrt(nu * np.pi)
        q = np.full(nu.shape, z)
        for _ in range(100):
            cdf = 1.0 - 0.5 * _betainc(nu / 2.0, 0.5, nu / (nu + q * q))
            step = (p - cdf) / (const * (1.0 + q * q / nu) ** (-(nu + 1) / 2))
            q = q + step
            if np.all(np.abs(step) < 1e-12 * q):
                break
        out[small] = q
    if len(_T_CACHE) < 100_000:
        _T_CACHE.update({(p, x): v for x, v in zip(uniq.tolist(), out.tolist(), strict=True)})
    return out[inverse.ravel()].reshape(df.shape)


# ---------------------------------------------------------------------------------------------
# Normal distribution helpers (numpy has neither Φ nor Φ⁻¹). Used on small arrays only.

_ERFC = np.vectorize(math.erfc, otypes=[float])

_A = (-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02, 1.383577518672690e02, -3.066479806614716e01, 2.506628277459239e00)
_B = (-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02, 6.680131188771972e01, -1.328068155288572e01)
_C = (
    -7.784894002430293e-03,
    -3.223964580411365e-01,
    -2.400758277161838e00,
    -2.549732539343734e00,
    4.374664141464968e00,
    2.938163982698783e00,
)
_D = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00)


def norm_cdf(x: np.ndarray) -> np.ndarray:
    """Φ(x), elementwise (``math.erfc``; for small arrays)."""
    x = np.asarray(x, dtype=float)
    return 0.5 * _ERFC(-x / math.sqrt(2.0))


def norm_ppf(p: np.ndarray) -> np.ndarray:
    """Φ⁻¹(p), elementwise: Acklam's rational approximation plus one Halley step.

    Works on the lower half (``min(p, 1 - p)``, exact for p ≥ 0.5) and flips the sign, so the
    upper tail suffers no cancellation. Accurate to ~1e-15 relative; p = 0 and p = 1 give ∓inf
    (used as never/always thresholds).
    """
    p = np.asarray(p, dtype=float)
    upper = p > 0.5
    m = np.where(upper, 1.0 - p, p)  # in [0, 0.5]
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.sqrt(-2 * np.log(np.where(m < 0.02425, m, 0.5)))
        tail = (((((_C[0] * q + _C[1]) * q + _C[2]) * q + _C[3]) * q + _C[4]) * q + _C[5]) / (
            (((_D[0] * q + _D[1]) * q + _D[2]) * q + _D[3]) * q + 1
        )
        q = m - 0.5
        r = q * q
        central = (
            (((((_A[0] * r + _A[1]) * r + _A[2]) * r + _A[3]) * r + _A[4]) * r + _A[5])
            * q
            / (((((_B[0] * r + _B[1]) * r + _B[2]) * r + _B[3]) * r + _B[4]) * r + 1)
        )
    x = np.where(m < 0.02425, tail, central)
    finite = m > 0
    if finite.any():
        xf = x[finite]
        e = 0.5 * _ERFC(-xf / math.sqrt(2.0)) - m[finite]
        u = e * math.sqrt(2 * math.pi) * np.exp(xf * xf / 2)
        x[finite] = xf - u / (1 + xf * u / 2)
    x = np.where(finite, x, -np.inf)
    return np.where(upper, -x, x)


_NR = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398, 1.48851587, -0.82215223, 0.17087277)


def log_norm_cdf(x: np.ndarray) -> np.ndarray:
    """log Φ(x), elementwise and accurate in both tails (no underflow far below 0): the
    Numerical Recipes Chebyshev fit of erfc (relative error < 1.2e-7) for the lower tail."""
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x) / math.sqrt(2.0)
    t = 1.0 / (1.0 + 0.5 * a)
    poly = np.zeros_like(a)
    for c in _NR[::-1]:
        poly = poly * t + c
    log_tail = np.log(t) - a * a + poly - math.log(2.0)  # log Φ(−|x|)
    with np.errstate(divide="ignore"):
        return np.where(x <= 0, log_tail, np.log1p(-np.exp(log_tail)))
