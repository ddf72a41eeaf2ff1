"""What validation accuracies say about the best checkpoint: the set that cannot be told apart
from the best, and the chosen checkpoint's accuracy corrected for having been chosen.

Every function takes a batch of ``R`` trajectories that share one item/cluster layout
(``R = 1`` for ``ckptsel select``; many in the truth-known benchmark): accuracies ``x`` (R, T),
their cluster-robust covariance ``sigma`` (R, T, T), and cluster-bootstrap accuracies ``xb``
(R, M, T).

* :func:`model_confidence_set` — the model confidence set of Hansen, Lunde & Nason (2011) with
  the range statistic on paired accuracy differences: for the current set ``S``,
  ``T_R = max_{i,j∈S} |x_i − x_j| / se_ij`` (``se_ij`` the cluster-robust s.e. of the paired
  difference); its null distribution is the cluster bootstrap of
  ``max_{i,j∈S} |(x*_i − x*_j) − (x_i − x_j)| / se_ij``. While the bootstrap p-value is below
  ``1 − level``, the checkpoint most significantly beaten (``argmax_i max_j t_ji``) leaves and
  the test is repeated. A checkpoint's MCS p-value is the largest test p-value up to its
  elimination; the set is ``{p_MCS ≥ 1 − level}``, and it holds every truly best checkpoint with
  probability ≥ ``level`` (asymptotically; the sequence of tests is family-wise controlled).
* :func:`winner_interval` — the hybrid estimate and interval of Andrews, Kitagawa & McCloskey
  (2024, "Inference on winners") for the accuracy of the checkpoint with the highest validation
  accuracy: conditional on the winner ``w`` and on ``Z = x − c x_w`` (``c = Σ_·w / Σ_ww``),
  ``x_w`` is normal with mean ``μ_w`` truncated to the values for which ``w`` still wins,
  further intersected with the level-(1−β) projection interval ``|x_w − μ| ≤ c_β σ_w``. The
  interval is ``{μ : a ≤ F(x_w; μ) ≤ 1 − a}``, ``a = (α − β) / (2 (1 − β))``, the estimate
  solves ``F = ½``. Three finite-sample choices:

  - *the winner's variance at the tested mean* (score form, as Wilson's interval for one
    proportion): ``σ_w²(μ) = d · μ(1 − μ)``, ``d = Σ_ww / (x_w(1 − x_w))`` the design effect of
    the clusters; ``c`` and ``Z`` stay those of the data. The plug-in ``Σ_ww`` of a winner is
    too small exactly when it matters (the winner is picked for a high accuracy, near 100% its
    ``x(1 − x)`` is a fraction of the truth's): with it the interval covered 70–87% at 95% best
    and 100 items; with the score form ≥ 95% in every cell measured (BENCHMARKS.md);
  - *the projection value* ``c_β`` is Šidák's ``Φ⁻¹(1 − (1 − (1 − β)^{1/T}) / 2)``: a valid
    simultaneous bound for any correlation (Šidák 1967), a little wider than the Monte-Carlo
    quantile when checkpoints are correlated, and exact, so nothing in the interval is random;
  - *discreteness*: accuracies move in steps of ``1/n``. The winner's accuracy is spread
    uniformly over its rounding cell ``x_w ± ½/n`` (only above ``x_w`` when others tie with it:
    it won the tie; the others stay at their accuracies) and the estimate and ends are
    averaged over the cell by a
    :data:`JITTER`-node midpoint rule (graded towards the tie point, where the ends move
    fastest); when several checkpoints tie at the top each is taken as the winner in turn and
    the results are averaged. Its numerical error is under 0.0001 pp (BENCHMARKS.md): the same
    data print the same digits.

  With few clusters ``Σ`` is inflated by ``(t_{G−1} / z)²``. The estimate is never above the
  naive one (``x_w``; with ties the rounding cell alone could lift it) and the lower end never
  above the estimate. A winner whose accuracy has no variance at all (right, or wrong, on every
  item; or the same accuracy in every cluster) has no normal approximation: its interval is the
  exact Clopper–Pearson interval over the ``G`` clusters, simultaneous over the ``T``
  checkpoints (each at level ``1 − α/T``, so it holds for whichever one was chosen), and its
  estimate the median-unbiased one (``0.5^(1/G)`` at 100%). Every end stays in ``[0, 1]``.
* :func:`naive_winner` — ``x_w ± z σ_w`` (clipped to ``[0, 1]``): what a plain report gives
  (optimistic).
"""

from __future__ import annotations

import numpy as np

from ckptsel.stats.distributions import log_norm_cdf, norm_ppf, t_quantile
from ckptsel.stats.exact import clopper_pearson
from ckptsel.stats.resample import Clusters

ZERO_VARIANCE = 1e-12  # a winner's variance below this has no normal approximation
PAIR_CELLS = 20_000_000  # (trajectory × draw × T × T) cells per chunk of the MCS bootstrap
BISECTIONS = 60
PROJECTION_DRAWS = 65536  # Gaussian draws of projection_critical (the earlier rule; benchmarks only)
JITTER = 256  # midpoint nodes over the winner's rounding cell (winner_interval)
GRADE = 2  # the nodes are t² (t the midpoint grid) in a cell that starts at a tie
NODE_CELLS = 8_000_000  # (node × T × T) covariance cells per chunk of winner_interval


def accuracy_moments(correct: np.ndarray, clusters: Clusters) -> tuple[np.ndarray, ...]:
    """``x`` (R, T) accuracies of ``correct`` (R, T, n), ``sums`` (R, G, T) per-cluster sums and
    ``sigma`` (R, T, T) the cluster-robust (CR1) covariance of ``x``."""
    c = np.asarray(correct, dtype=np.float64)
    n = c.shape[2]
    G = clusters.count
    sums = clusters.sums(c.transpose(2, 0, 1)).transpose(1, 0, 2)  # (R, G, T)
    x = c.mean(axis=2)
    resid = sums - clusters.sizes[None, :, None] * x[:, None, :]
    sigma = (G / max(G - 1, 1)) * np.einsum("rgt,rgu->rtu", resid, resid) / (n * n)
    return x, sums, sigma


def bootstrap_accuracies(sums: np.ndarray, sizes: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``(R, M, T)`` cluster-bootstrap accuracies for the ``(M, G)`` cluster ``counts``."""
    return np.einsum("mg,rgt->rmt", counts, sums) / (counts @ sizes)[None, :, None]


def _pair_se(sigma: np.ndarray) -> np.ndarray:
    """``(R, T, T)`` standard errors of the paired differences ``x_i − x_j``."""
    d = np.diagonal(sigma, axis1=1, axis2=2)
    return np.sqrt(np.clip(d[:, :, None] + d[:, None, :] - 2 * sigma, 0.0, None))


def _boot_range(dev: np.ndarray, inv: np.ndarray) -> np.ndarray:
    """``(R, M)`` bootstrap range statistics ``max_{ij} |dev_i − dev_j| · inv_ij`` of the
    deviations ``dev`` (R, M, T), in chunks of draws (memory bound)."""
    R, M, T = dev.shape
    out = np.empty((R, M))
    step = max(1, PAIR_CELLS // max(1, R * T * T))
    for a in range(0, M, step):
        d = dev[:, a : a + step]
        out[:, a : a + step] = (np.abs(d[..., :, None] - d[..., None, :]) * inv[:, None]).max(axis=(2, 3))
    return out


def model_confidence_set(x: np.ndarray, sigma: np.ndarray, xb: np.ndarray, level: float) -> dict:
    """The model confidence set (module docstring). Returns ``in_set`` (R, T) bool, ``p_mcs``
    (R, T), ``order`` (R, T) the elimination step of each checkpoint (−1: the last survivor),
    and per step ``p_steps``, ``statistic`` (R, T − 1). One pass per eliminated checkpoint."""
    R, T = x.shape
    se = _pair_se(sigma)
    pos = se > 0
    inv_all = np.where(pos, 1.0 / np.where(pos, se, 1.0), 0.0)
    diff = x[:, :, None] - x[:, None, :]
    # t_ij; a difference with no variance at all (the same in every cluster) is decisive
    with np.errstate(invalid="ignore"):
        t = np.where(pos | (np.abs(diff) <= 1e-12), diff * inv_all, np.sign(diff) * np.inf)
    dev = xb - x[:, None, :]
    active = np.ones((R, T), dtype=bool)
    p_mcs, order = np.ones((R, T)), np.full((R, T), -1)
    p_steps, stat = np.full((R, T - 1), np.nan), np.full((R, T - 1), np.nan)
    p_run, rows = np.zeros(R), np.arange(R)
    for step in range(T - 1):  # eliminate down to one survivor: every checkpoint's p-value
        pair = active[:, :, None] & active[:, None, :]
        tr = np.where(pair, np.abs(t), 0.0).max(axis=(1, 2))
        trb = _boot_range(dev, np.where(pair, inv_all, 0.0))
        p = (trb >= tr[:, None] - 1e-12).mean(axis=1)
        p_run = np.maximum(p_run, p)
        p_steps[:, step], stat[:, step] = p, tr
        beaten = np.where(pair, t.transpose(0, 2, 1), -np.inf).max(axis=2)  # max_j t_ji
        e = np.where(active, beaten, -np.inf).argmax(axis=1)
        p_mcs[rows, e], order[rows, e] = p_run, step
        active[rows, e] = False
    p_mcs[active] = np.maximum(p_mcs[active], 1.0)
    return {"in_set": p_mcs >= 1 - level, "p_mcs": p_mcs, "order": order, "p_steps": p_steps, "statistic": stat}


def projection_critical(sigma: np.ndarray, beta: float, rng: np.random.Generator, draws: int = PROJECTION_DRAWS) -> np.ndarray:
    """``(R,)`` 1−β quantiles of ``max_t |W_t| / sd_t``, ``W ~ N(0, Σ)`` (``draws`` Gaussian draws
    shared by the batch): the Monte-Carlo projection value of the earlier rule (benchmarks)."""
    T = sigma.shape[1]
    sd = np.sqrt(np.clip(np.diagonal(sigma, axis1=1, axis2=2), 1e-30, None))
    w, u = np.linalg.eigh(sigma / (sd[:, :, None] * sd[:, None, :]))
    root = u * np.sqrt(np.clip(w, 0, None))[:, None, :]
    z = rng.standard_normal((draws, T))
    return np.quantile(np.abs(np.einsum("mt,rut->rmu", z, root)).max(axis=2), 1 - beta, axis=1)


def sidak_critical(checkpoints: int, beta: float) -> float:
    """Šidák's projection value: ``P(max_t |W_t| / sd_t ≤ c) ≥ 1 − β`` for ``W ~ N(0, Σ)``
    whatever the correlations, exact when they are 0."""
    return float(norm_ppf(np.array(1 - (1 - (1 - beta) ** (1.0 / checkpoints)) / 2)))


def _truncated_cdf(y: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``P(W ≤ y | lo ≤ W ≤ hi)``, ``W ~ N(0, 1)``, stable in both tails (all arrays alike)."""
    y = np.clip(y, lo, hi)
    upper = lo > 0  # the whole interval in the upper tail: work with survival functions
    a, b = np.where(upper, -hi, lo), np.where(upper, -lo, hi)
    yy = np.where(upper, -y, y)
    la, lb, ly = log_norm_cdf(a), log_norm_cdf(b), log_norm_cdf(yy)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        num = np.exp(ly - lb) * -np.expm1(np.minimum(la - ly, 0.0))
        den = -np.expm1(np.minimum(la - lb, 0.0))
        f = np.clip(np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.5), 0.0, 1.0)
    return np.where(upper, 1.0 - f, f)


def _hybrid(x: np.ndarray, sigma: np.ndarray, level: float, beta: float, c_beta: np.ndarray, deff: np.ndarray | None = None):
    """Hybrid estimate, lower and upper end (each (R,)) for continuous accuracies ``x`` (R, T):
    the winner is ``argmax x`` (no ties). Bisection on μ, all trajectories at once. With the
    design effects ``deff`` (R,) the winner's variance is the one at the tested μ,
    ``deff · μ(1 − μ)`` (μ in [0, 1]); without, the plug-in ``Σ_ww`` (the earlier rule)."""
    R, T = x.shape
    a = ((1 - level) - beta) / (2 * (1 - beta))
    rows = np.arange(R)
    w = x.argmax(axis=1)
    var = np.maximum(sigma[rows, w, w], ZERO_VARIANCE)  # rows without variance: exact_winner
    sd, y = np.sqrt(var), x[rows, w]
    c = sigma[rows, :, w] / var[:, None]  # (R, T)
    k = 1.0 - c
    z = x - c * y[:, None]
    others = np.arange(T)[None, :] != w[:, None]
    bound = z / np.where(np.abs(k) > 1e-12, k, 1.0)  # w still wins iff k_j y ≥ z_j for every j
    lower = np.minimum(np.where(others & (k > 1e-12), bound, -np.inf).max(axis=1), y)[:, None]
    upper = np.maximum(np.where(others & (k < -1e-12), bound, np.inf).min(axis=1), y)[:, None]
    targets = np.array([1 - a, 0.5, a])[None, :]  # lo, estimate, hi (F decreases in μ)
    if deff is None:
        left = np.repeat((y - c_beta * sd)[:, None], 3, axis=1)
        right = np.repeat((y + c_beta * sd)[:, None], 3, axis=1)
    else:
        left, right = np.zeros((R, 3)), np.ones((R, 3))
    cb, sd2, y2 = c_beta[:, None], sd[:, None], y[:, None]
    for _ in range(BISECTIONS):
        mu = (left + right) / 2
        if deff is not None:
            sd2 = np.sqrt(np.maximum(deff[:, None] * mu * (1 - mu), ZERO_VARIANCE))
        lo_t = np.maximum(lower, mu - cb * sd2)
        hi_t = np.minimum(upper, mu + cb * sd2)
        f = _truncated_cdf((y2 - mu) / sd2, (lo_t - mu) / sd2, (hi_t - mu) / sd2)
        f = np.where(y2 < mu - cb * sd2, 0.0, np.where(y2 > mu + cb * sd2, 1.0, f))  # outside
        go_right = f > targets
        left, right = np.where(go_right, mu, left), np.where(go_right, right, mu)
    sol = (left + right) / 2
    return sol[:, 1], sol[:, 0], sol[:, 2]


def _cell_nodes(x: np.ndarray, n: int, nodes: int) -> tuple[np.ndarray, ...]:
    """The quadrature over the winners' rounding cells: per (row, tied winner) pair ``P`` rows
    of ``nodes`` points each, ``x`` with the winner's accuracy moved inside its cell (R·…, T),
    the pair's row (P,), its winner (P,), and the weight of each point (P·nodes,) (summing to 1
    per row of ``x``)."""
    top = x >= x.max(axis=1, keepdims=True) - 1e-12
    rr, ww = np.nonzero(top)  # every tied winner of every row
    tied = top.sum(axis=1)[rr]
    t = (np.arange(nodes) + 0.5) / nodes
    spread = np.where(tied[:, None] > 1, 0.5 * t[None, :] ** GRADE, t[None, :] - 0.5) / n
    weight = np.where(tied[:, None] > 1, GRADE * t[None, :] ** (GRADE - 1), 1.0) / (nodes * tied[:, None])
    xj = np.repeat(x[rr], nodes, axis=0)
    pts = np.arange(len(rr) * nodes)
    xj[pts, np.repeat(ww, nodes)] += spread.ravel()
    return xj, rr, ww, weight.ravel()


def winner_interval(
    x: np.ndarray, sigma: np.ndarray, n: int, clusters: int, level: float, jitter: int = JITTER, beta: float | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The hybrid (estimate, lo, hi) (each (R,)) of the winner's accuracy (module docstring)
    for accuracies ``x`` (R, T) of ``n`` items in ``clusters`` clusters, averaged over
    ``jitter`` nodes of the winner's rounding cell; also ``c_beta`` (R,). Nothing is random:
    the same data give the same digits. The nodes of the whole
    batch are solved at once (``R × jitter`` rows, times the number tied at the top)."""
    alpha = 1 - level
    beta = alpha / 10 if beta is None else beta
    z = float(norm_ppf(np.array(1 - alpha / 2)))
    inflate = (float(t_quantile(1 - alpha / 2, np.array(float(max(clusters - 1, 2))))) / z) ** 2
    sigma = sigma * inflate
    R, T = x.shape
    c_beta = np.full(R, sidak_critical(T, beta))
    rows, w = np.arange(R), x.argmax(axis=1)
    acc = x[rows, w]
    xj, rr, ww, weight = _cell_nodes(x, n, jitter)
    # each (tied) winner's design effect: its variance over that of single items
    deff = np.repeat(sigma[rr, ww, ww] / np.maximum(acc[rr] * (1 - acc[rr]), ZERO_VARIANCE), jitter)
    pair = np.repeat(rr, jitter)
    est, lo, hi = np.zeros(R), np.zeros(R), np.zeros(R)
    step = max(1, NODE_CELLS // (T * T))  # nodes per chunk: their covariances fit in memory
    for s in range(0, len(pair), step):
        q = pair[s : s + step]
        sol = _hybrid(xj[s : s + step], sigma[q], level, beta, c_beta[q], deff[s : s + step])
        for out, v in zip((est, lo, hi), sol, strict=True):
            out += np.bincount(q, v * weight[s : s + step], minlength=R)
    for r in np.flatnonzero(without_variance(x, sigma)):  # exact, a few rows at most
        est[r], lo[r], hi[r] = exact_winner(float(acc[r]), clusters, T, level)
    est = np.minimum(est, acc)  # never above the naive estimate (the cell alone lifts a tie)
    lo = np.minimum(lo, est)
    return np.clip(est, 0.0, 1.0), np.clip(lo, 0.0, 1.0), np.clip(hi, 0.0, 1.0), c_beta


def without_variance(x: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """``(R,)`` whether the winner (``argmax x``) of each row has no variance (exact interval)."""
    w = x.argmax(axis=1)
    return sigma[np.arange(len(w)), w, w] < ZERO_VARIANCE


def exact_winner(accuracy: float, clusters: int, checkpoints: int, level: float) -> tuple[float, ...]:
    """(estimate, lo, hi) of a winner whose accuracy has no variance (module docstring): the
    Clopper–Pearson interval of ``accuracy × clusters`` successes in ``clusters``, each of the
    ``checkpoints`` at level ``1 − α/checkpoints``; the estimate the median-unbiased one (the
    one-sided 50% bound at 0 or 100%, the middle of both inside)."""
    k = accuracy * clusters
    lo, hi = clopper_pearson(k, clusters, 1.0 - (1.0 - level) / checkpoints)
    m_lo, m_hi = clopper_pearson(k, clusters, 0.0)
    mid = m_lo if k >= clusters else (m_hi if k <= 0 else (m_lo + m_hi) / 2)
    return mid, lo, hi


def naive_winner(x: np.ndarray, sigma: np.ndarray, level: float) -> tuple[np.ndarray, ...]:
    """``x_w ± z σ_w`` (each (R,)), averaged over exact ties at the top: the uncorrected report."""
    z = float(norm_ppf(np.array(1 - (1 - level) / 2)))
    w = (x >= x.max(axis=1, keepdims=True) - 1e-12).astype(float)
    w /= w.sum(axis=1, keepdims=True)
    se = np.sqrt(np.clip(np.diagonal(sigma, axis1=1, axis2=2), 0, None))
    mean, s = (w * x).sum(axis=1), (w * se).sum(axis=1)
    return mean, np.clip(mean - z * s, 0.0, 1.0), np.clip(mean + z * s, 0.0, 1.0)
