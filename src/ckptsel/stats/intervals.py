"""Interval methods for few configurations (SPEC §8), all vectorized over quantities.

What each family estimates (a "gain" is any per-trajectory quantity: G, H, D, B, …):

* **configuration** family — the trajectory-weighted mean gain over a *population of
  configurations* (new configurations, new seeds), **conditional on the observed test items**:
  the configurations are the sampling units, the test pool is held fixed.
* **question** family — the gain over a *population of test questions*, **conditional on the
  observed trajectories and their frozen choices**: only the questions are resampled.
* **joint** family — both sources at once: the superpopulation mean over configurations *and*
  test questions. Configurations × questions is a crossed design (every trajectory of a task
  answers the same questions), so its variance is ``σ_A²/K + σ_B²/N + σ_E²/(KN)`` in the
  random-effects reading (configuration, question and interaction components).

Methods (``METHODS``; the analysis-wide ``--interval`` picks one):

* ``percentile`` — the paper's: percentile intervals of the configuration bootstrap (and of the
  pigeonhole joint bootstrap). Kept byte-for-byte so a paper's numbers reproduce.
* ``cr2`` — cluster-robust t interval for the (intercept-only) mean: CR2 bias-reduced variance
  (Bell & McCaffrey 2002) with the Bell–McCaffrey degrees of freedom under the working model
  Ω = σ²I (Imbens & Kolesár 2016). The joint interval uses the two-way variance with the
  crossed-design correction (Owen 2007; Owen & Eckles 2012) and Satterthwaite degrees of freedom.
* ``wild`` — wild cluster bootstrap-t (unrestricted residuals, Webb six-point weights;
  Cameron, Gelbach & Miller 2008; Webb 2014), studentized with the CR2 standard error; joint
  as for ``cr2``.

Written here rather than taken from ``wildboottest``/``statsmodels``: those fit one regression
(one quantity) per call, while an analysis needs hundreds of quantities sharing the same draws;
for an intercept-only model every formula reduces to matrix products over the per-configuration
sums ``sums``/``sizes`` ``(K, Q)`` that the configuration bootstrap already uses.
"""

from __future__ import annotations

import numpy as np

from ckptsel._util import rng as streams
from ckptsel.stats.distributions import t_quantile

METHODS = ("percentile", "cr2", "wild")
WEBB = np.array([-np.sqrt(1.5), -1.0, -np.sqrt(0.5), np.sqrt(0.5), 1.0, np.sqrt(1.5)])


def _safe_div(a, b):
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(b > 0, a / np.where(b > 0, b, 1.0), np.nan)


def cr2(sums: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Point estimate, CR2 variance and Bell–McCaffrey df of the trajectory-weighted mean.

    ``sums[k, q]``: total of quantity q over configuration k's trajectories; ``sizes[k, q]``: how
    many of them have it (0 = configuration absent for q). Returns three ``(Q,)`` arrays.

    For y = 1μ + e with clusters k of sizes n_k (N = Σ n_k), the leverage block is J/N, so the
    CR2 adjustment (I − J/N)^(-1/2) multiplies the cluster score u_k = s_k − n_k μ̂ by
    c_k = (1 − n_k/N)^(-1/2): V = Σ c_k² u_k² / N². The Bell–McCaffrey df is (tr M)²/‖M‖²_F with
    M = diag(c²n) − v vᵀ/N, v = c∘n (the Gram matrix of the CR2 influence vectors, up to scale).
    """
    N = sizes.sum(axis=0)
    mean = _safe_div(sums.sum(axis=0), N)
    u = sums - sizes * np.nan_to_num(mean)
    with np.errstate(invalid="ignore", divide="ignore"):
        c2 = np.where(sizes > 0, N / (N - sizes), 0.0)  # c_k²; inf when one configuration has all
        var = (c2 * u * u).sum(axis=0) / N**2
        d = c2 * sizes  # diagonal of M
        v2 = c2 * sizes**2  # v_k²
        tr = d.sum(axis=0) - v2.sum(axis=0) / N
        fro = (d * d).sum(axis=0) - 2.0 * (d * v2).sum(axis=0) / N + (v2.sum(axis=0) / N) ** 2
        df = tr * tr / fro
    bad = ~np.isfinite(var) | ~np.isfinite(df) | ((sizes > 0).sum(axis=0) < 2)
    return mean, np.where(bad, np.nan, var), np.where(bad, np.nan, df)


def t_interval(mean, var, df, level: float) -> tuple[np.ndarray, np.ndarray]:
    """``mean ± t_{df, (1+level)/2} √var`` (NaN where var or df is not finite)."""
    ok = np.isfinite(var) & ~np.isnan(df) & (df > 0)
    q = t_quantile(0.5 + level / 2.0, np.where(ok, df, 1.0))
    half = q * np.sqrt(np.where(ok, var, 0.0))
    return np.where(ok, mean - half, np.nan), np.where(ok, mean + half, np.nan)


def cr2_interval(sums, sizes, level: float = 0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(mean, lo, hi)``: the CR2 / Bell–McCaffrey t interval, ``(Q,)`` each."""
    mean, var, df = cr2(sums, sizes)
    lo, hi = t_interval(mean, var, df, level)
    return mean, lo, hi


def webb_weights(n_configurations: int, draws: int, seed: int, stream: int = 0) -> np.ndarray:
    """``(draws, K)`` Webb six-point weights (mean 0, variance 1), one row per bootstrap draw."""
    rng = streams.generator(seed, streams.WILD_WEIGHTS, stream)
    return WEBB[rng.integers(0, 6, size=(draws, n_configurations))]


def wild_t_stats(W: np.ndarray, sums, sizes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Wild cluster bootstrap-t: ``(mean (Q,), se (Q,), t* (draws, Q))``.

    Draw b multiplies configuration k's residuals by ``W[b, k]``: y* = μ̂ + w_k e. Then
    δ = μ* − μ̂ = (W u)/N, the bootstrap cluster scores are u*_k = w_k u_k − n_k δ, and
    V* = Σ c_k² u*_k² / N² = [(W²)(c²u²) − 2δ∘W(c²un) + δ²Σc²n²]/N², all matrix products.

    A draw whose bootstrap scores all vanish (V* = 0 up to rounding) while δ ≠ 0 has t* = ±∞:
    kept as such (it lies in a tail), never dropped. Such draws are not rare at two
    configurations: the residuals satisfy Σ u_k = 0, so u*_k = (w_k u_k − n_k δ) is zero for both
    clusters whenever w_1/n_1 = w_2/n_2 on the residual line (equal sizes: w_1 = −w_2, 1 draw in 6
    with Webb weights), and rounding turns the exact 0 into V* ≈ 1e-30 (t* ≈ ±5e7). Below three
    configurations the method is degenerate and ``stats.summarize`` reports no interval.
    """
    N = sizes.sum(axis=0)
    mean, var, _ = cr2(sums, sizes)
    u = sums - sizes * np.nan_to_num(mean)
    with np.errstate(invalid="ignore", divide="ignore"):
        c2 = np.where(sizes > 0, N / (N - sizes), 0.0)
        c2 = np.where(np.isfinite(c2), c2, 0.0)
        delta = (W @ u) / N
        scale = (c2 * u * u).sum(axis=0)  # N² × the CR2 variance: the size of V*'s terms
        vstar = ((W * W) @ (c2 * u * u) - 2.0 * delta * (W @ (c2 * u * sizes))) / N**2
        vstar += delta**2 * (c2 * sizes**2).sum(axis=0) / N**2
        spread = vstar > 1e-10 * scale / N**2  # else V* = 0 but for rounding: no bootstrap spread
        moved = np.abs(delta) * N > 1e-10 * np.sqrt(scale)  # δ ≠ 0 beyond rounding
        # no spread: ±∞ where the draw moved the mean, 0 where it did not (the sample itself)
        flat = np.where(moved, np.sign(delta) * np.inf, 0.0)
        tstar = np.where(spread, delta / np.sqrt(np.where(spread, vstar, 1.0)), flat)
    return mean, np.sqrt(var), tstar


def wild_interval(W: np.ndarray, sums, sizes, level: float = 0.95):
    """``(mean, lo, hi)``: percentile-t interval μ̂ − q*_{1−α/2} se, μ̂ − q*_{α/2} se.

    Every draw counts (±∞ ones too, see :func:`wild_t_stats`); where a quantile falls on an
    infinite draw the interval is NaN (undefined), and the caller reports it as not estimable.
    """
    mean, se, tstar = wild_t_stats(W, sums, sizes)
    alpha = (1.0 - level) / 2.0
    with np.errstate(invalid="ignore"):
        qlo, qhi = np.quantile(tstar, [alpha, 1.0 - alpha], axis=0)
        ok = np.isfinite(se) & np.isfinite(qlo) & np.isfinite(qhi)
        lo, hi = np.where(ok, mean - qhi * se, np.nan), np.where(ok, mean - qlo * se, np.nan)
    flat = se == 0.0  # every configuration has the same mean: no spread to resample
    return mean, np.where(flat, mean, lo), np.where(flat, mean, hi)


def twoway_variance(
    utilities: dict[str, np.ndarray], config_index: dict[str, np.ndarray], sizes: np.ndarray, columns
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Crossed-design (configurations × questions) variance of the pooled mean, moment form.

    ``utilities[task]`` ``(K_task, N_task, Q)`` (per-configuration sums over trajectories of the
    per-question utility), ``config_index[task]`` its rows in ``sizes`` ``(K, Q)``; ``columns``
    picks the quantities. Returns ``(V_configuration, V_question, V_overlap, df_configuration)``,
    each ``(len(columns),)``: the configuration part is the CR2 variance (it contains σ_A²/K and
    the interaction σ_E²/(KN)), the question part the variance of the per-question totals (σ_B²/N
    and again σ_E²/(KN)), and the overlap the interaction counted twice, estimated from the
    double-centred residuals of the configuration × question table (Owen 2007's correction, which
    for the pigeonhole bootstrap removes the interaction's excess). Joint variance =
    V_configuration + V_question − V_overlap.
    """
    cols = np.asarray(columns, dtype=np.int64)
    sz = sizes[:, cols]
    total = sz.sum(axis=0)
    vq = np.zeros(len(cols))
    overlap = np.zeros(len(cols))
    conf_sums = np.zeros((sizes.shape[0], len(cols)))
    for task in sorted(utilities):  # loop over tasks only (a handful)
        idx = config_index[task]
        util = utilities[task][:, :, cols]  # (K_t, N_t, Q)
        n_items = util.shape[1]
        conf_sums[idx] = util.mean(axis=1)
        per_question = util.sum(axis=0)  # (N_t, Q)
        vq += per_question.var(axis=0, ddof=1) / n_items / total**2 if n_items > 1 else np.nan
        n_k = sz[idx]  # (K_t, Q)
        present = n_k > 0
        r = present.sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            ybar = np.where(present[:, None, :], util / np.where(present, n_k, 1.0)[:, None, :], 0.0)
            row = ybar.mean(axis=1, keepdims=True)
            col = ybar.sum(axis=0, keepdims=True) / r
            grand = row.sum(axis=0, keepdims=True) / r
            resid = np.where(present[:, None, :], ybar - row - col + grand, 0.0)
            sigma2 = (resid**2).sum(axis=(0, 1)) / ((r - 1) * (n_items - 1))
        overlap += np.where(r > 1, sigma2, 0.0) * (n_k**2).sum(axis=0) / n_items / total**2
    _, vc, dfc = cr2(conf_sums, sz)
    return vc, vq, overlap, dfc


def twoway_interval(utilities, config_index, sizes, columns, means, level: float = 0.95, dfq=None):
    """``(lo, hi)``: μ̂ ± t √V with V = V_conf + V_quest − V_overlap (floored at the larger
    one-way part) and Satterthwaite df from the CR2 (Bell–McCaffrey) and question parts."""
    vc, vq, overlap, dfc = twoway_variance(utilities, config_index, sizes, columns)
    if dfq is None:
        dfq = sum(u.shape[1] - 1 for u in utilities.values())
    v = np.maximum(vc + vq - overlap, np.maximum(vc, vq))
    with np.errstate(invalid="ignore", divide="ignore"):
        df = v**2 / (vc**2 / dfc + vq**2 / dfq)
    return t_interval(means, v, df, level)
