"""``ckptsel plan``: how many validation items does a selection rule need?

Two answers.

**From pilot records** (one or more trajectories measured on some validation items). The
question is ``P(beat)``: the probability that the rule's choice on ``b`` fresh validation items
is strictly better than the final checkpoint on new items. The default method
(``"calibrated"``) promises only what the pilot can support:

* per pilot item ``i`` and checkpoint ``t < T`` the paired differences to the final checkpoint,
  ``x_ti = ±(s_ti − s_Ti)`` for the rule's signal (signed so that larger is better) and
  ``y_ti = z_ti − z_Ti`` for correctness; their item means ``ŝ``, ``d̂`` (T−1 each) and their
  cluster-robust (CR1) covariances (items sharing a ``group`` form one cluster);
* a fresh set of ``b`` items gives signal differences ``S_b ~ N(s, Σ_s / b)`` (``Σ_s = n V̂_s``,
  the per-item covariance, design effect included); the rule keeps ``argmax_t S_b,t`` when that
  maximum is > 0 and the final checkpoint otherwise; ``P(beat) = P(max S_b > 0 and d_pick > 0)``;
* the promise is that probability at the *least favourable truth* in the simultaneous box of
  level ``level`` around (ŝ, d̂) (critical values by Gaussian draws with the pilot's
  correlation): checkpoints whose gap is confidently > 0 (``L_t > 0``) sit at their lower bounds,
  every other checkpoint is a non-beater as strong as the box allows (gap ``min(U_t, 0)``, signal
  at its upper bound). A beater needs only its lower bound, so the lower bounds are one-sided
  and simultaneous (``L = d̂ − c₁ se``, ``c₁`` the ``level`` quantile of ``max_t W_t``;
  before it they were two-sided, ``max_t |W_t|``, and fewer pilots got a plan); the upper
  bounds stay two-sided (``c₂``). With probability ≥ ``level`` no checkpoint's gap is
  below its lower bound, so when the final checkpoint is the best a plan is made with
  probability ≤ 1 − level, whatever the budget (``benchmarks/bench_plan.py`` measures it,
  hostile truths included). A pilot of fewer than ``MIN_PROMISE_CLUSTERS`` (10) clusters
  promises nothing (its variance, often 0, says nothing), one of a single cluster is an error;
* the planned budget (``planned_budget``, also ``safe_budget``) is the smallest whose promise
  reaches ``target``; otherwise the answer is "no budget up to the largest reaches the
  target", with the largest promise and its budget.

The pilot-as-truth curve (``p_beat_point``: the same formula at (ŝ, d̂)) is reported beside the
promise, and with it the power the safe plan leaves on the table: ``smallest_budget``, the
smallest budget whose ``p_beat_point`` reaches ``target`` (a point estimate, *not guaranteed*:
it takes the pilot's noise as truth, and when the final checkpoint is truly the best it still
names a budget for about half of the pilots, BENCHMARKS.md; never above ``safe_budget``; null
when none reaches it), and ``power_left``: ``extra_items`` (``safe_budget − smallest_budget``, null when either is null),
``p_beat_point_at_smallest`` / ``promise_at_smallest`` and ``p_beat_point_at_safe`` /
``promise_at_safe`` (the estimate and the promise at each; null where there is no such budget;
the promises null with the resampling methods, whose ``p_beat`` is itself the estimate) and
``note`` (one sentence: "the target may be met at N items …; the safe plan asks for
M"). ``benchmarks/bench_plan.py`` measures both on truth-known scenarios.

The older resampling methods remain (``method="split"``, ``"pilot"``): the rule chooses on
resampled validation sets of about ``n`` items (whole clusters) and the choice is scored on the
pilot pool (``"pilot"``) or on the other half of the pilot (``"split"``). They take the pilot's
differences as exact and promise gains that are not there (BENCHMARKS.md).

**Closed form from assumed inputs** (Card et al. 2020; Miller 2024) for two checkpoints, A
better than the final checkpoint B by ``δ`` (pp), that give the same correctness on a fraction
``ρ`` of items (agreement rate). With the discordant fraction ``q = 1 − ρ`` the per-item paired
difference has variance ``σ² = q − δ²`` and, by the normal approximation,

* ``P(the rule picks A on n items) = Φ(δ √n / σ)`` (ties split evenly), expected gain
  ``δ · P``; the budget for ``P ≥ π`` is ``n = (z_π σ / δ)²``;
* the paired standard error of the accuracy difference is ``σ / √n`` (Miller 2024);
* the paired minimum detectable effect at ``n`` items (two-sided level ``α``, power ``π``,
  ``k = z_{1−α/2} + z_π``) is ``MDE(n) = k √q / √(n + k²)``, the exact solution of
  ``δ = k √((q − δ²)/n)``; the budget whose MDE is ``δ`` is ``n = k² (q − δ²) / δ²``: below it
  a real gain of ``δ`` cannot be told from noise with that power (the paired-MDE budget);
* the McNemar budget ``n = (z_{1−α/2} √q + z_π σ)² / δ²`` (Connor 1987), nearly the same.

**Exact power of the exact McNemar test** (``compare-logs``' ``items_needed``), where the
normal approximation above is optimistic: at its budget the exact test's power is below the
target (0.70–0.80 on typical tables, 0 where it names 3 items). :func:`mcnemar_power` is the
exact power on ``n`` independent items with discordance probabilities ``p_a``, ``p_b``:
``Σ_m Bin(n, p_a + p_b)(m) r(m)``, ``r(m)`` the probability that ``m`` discordant items split so
that the test rejects (its critical values, :func:`mcnemar_critical`, once for every ``m``).
:func:`exact_items_needed` is the smallest ``n`` from which on that power stays ≥ the target
up to :data:`EXACT_LIMIT` (it is not monotone in ``n``), with :func:`mcnemar_power_bound` (a
Hoeffding/Bernstein and Berry–Esseen lower bound) certifying the large ``n`` at once, so the
exact sums run only between the answer and where the bound takes over.

Everything is vectorized: one (draws × checkpoints) matrix of normal draws per trajectory and
one argmax per budget (calibrated); one counts matrix and one matrix product per budget and
chunk of draws (resampling); blocks of (items × counts) log-space binomials (exact power).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ckptsel import defaults
from ckptsel._util import rng as streams
from ckptsel._util.checks import check_choice, check_int, check_level, check_seed
from ckptsel.choose import core
from ckptsel.defaults import CONFIDENCE
from ckptsel.errors import CkptselError
from ckptsel.records.load import load_validation
from ckptsel.records.schema import MATCHED_WINDOW
from ckptsel.stats.distributions import norm_cdf, norm_ppf
from ckptsel.stats.resample import Clusters, chunked_counts

PLAN_RULES = ("accuracy", "agreement", "nll")
PLAN_METHODS = ("calibrated", "split", "pilot")
CRITICAL_DRAWS = 10_000  # Gaussian draws for the box's simultaneous critical value
MIN_PROMISE_CLUSTERS = 10  # fewer pilot clusters: their variance says nothing, nothing is promised
BEAT_CELLS = 4_000_000  # (budget × draw × checkpoint) cells per chunk of beat_curves (~32 MB)
MAXIMIZE = {"accuracy": True, "agreement": True, "nll": False}


@dataclass(frozen=True)
class PlanSettings:
    """Budgets to plan for, resampling draws, seed, the target probability of beating the final
    checkpoint, and the pilot method (validated when built)."""

    budgets: tuple[int, ...] = field(default_factory=lambda: default_budgets(defaults.PLAN_MAX_BUDGET))
    draws: int = defaults.PLAN_DRAWS
    seed: int = defaults.SEED
    target: float = defaults.PLAN_TARGET  # P(beat final) a planned budget must reach
    method: str = "calibrated"  # the box promise (module docstring); or "split", "pilot"
    level: float = CONFIDENCE  # confidence of the calibrated promise

    def __post_init__(self) -> None:
        check_int(self.draws, "--draws", low=defaults.MIN_DRAWS, high=defaults.MAX_DRAWS)
        check_seed(self.seed)
        check_level(self.target, "--target")
        check_level(self.level, "--confidence")
        check_choice(self.method, "--method", PLAN_METHODS)
        if isinstance(self.budgets, (str, bytes)) or not len(self.budgets):
            raise CkptselError("--budgets: give at least one budget")
        for b in self.budgets:
            check_int(b, "budgets", low=1)


def default_budgets(max_budget: int) -> tuple[int, ...]:
    """16, 32, 64, … up to ``max_budget`` (always included)."""
    check_int(max_budget, "--max-budget", low=1)
    out = [b for b in (2 ** np.arange(4, 31)).tolist() if b < max_budget]
    return tuple(out + [int(max_budget)])


# --------------------------------------------------------------------------- calibrated promise
@dataclass(frozen=True)
class PilotMoments:
    """Paired differences to the final checkpoint over one pilot: item means and their
    cluster-robust (CR1) covariances. ``k = T − 1``."""

    s_hat: np.ndarray  # (k,) signal differences (larger = better)
    d_hat: np.ndarray  # (k,) accuracy differences (fraction)
    v_s: np.ndarray  # (k, k) covariance of s_hat
    v_d: np.ndarray  # (k, k) covariance of d_hat
    v_sd: np.ndarray  # (k, k) cov(s_hat, d_hat)
    items: int
    clusters: int
    same: bool  # the signal is the correctness (accuracy rule): s ≡ d

    @classmethod
    def of(cls, signal: np.ndarray, correct: np.ndarray, groups: np.ndarray, maximize: bool):
        """From ``signal`` and ``correct`` (T, n) and the items' ``groups`` (n,)."""
        signal = np.asarray(signal, dtype=np.float64)
        correct = np.asarray(correct, dtype=np.float64)
        sign = 1.0 if maximize else -1.0
        x = sign * (signal[:-1] - signal[-1:])  # (k, n)
        y = correct[:-1] - correct[-1:]
        k, n = y.shape
        clusters = Clusters.of(groups)
        G = clusters.count
        v = np.concatenate([x, y]).T  # (n, 2k)
        mean = v.mean(axis=0)
        r = clusters.sums(v - mean)  # (G, 2k)
        cov = (G / max(G - 1, 1)) * (r.T @ r) / (n * n)
        same = bool(np.array_equal(x, y))
        return cls(mean[:k], mean[k:], cov[:k, :k], cov[k:, k:], cov[:k, k:], n, G, same)


def _sqrt_psd(cov: np.ndarray) -> np.ndarray:
    """``L`` with ``L Lᵀ = cov`` for a symmetric positive semi-definite ``cov`` (k, k)."""
    w, u = np.linalg.eigh((cov + cov.T) / 2)
    return u * np.sqrt(np.clip(w, 0.0, None))


def max_abs_t_critical(cov: np.ndarray, level: float, rng: np.random.Generator) -> float:
    """The ``level`` quantile of ``max_t |W_t| / sd_t``, ``W ~ N(0, cov)`` (``cov`` (q, q);
    coordinates with sd 0 are left out): the simultaneous two-sided critical value."""
    return simultaneous_critical(cov, level, rng)[1]


def simultaneous_critical(cov: np.ndarray, level: float, rng: np.random.Generator) -> tuple[float, float]:
    """``(one-sided, two-sided)`` simultaneous critical values from the same Gaussian draws
    ``W ~ N(0, cov)`` (``cov`` (q, q); coordinates with sd 0 are left out): the ``level``
    quantiles of ``max_t W_t / sd_t`` (lower bounds that hold together) and ``max_t |W_t| / sd_t``."""
    sd = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    ok = sd > 0
    if not ok.any():
        return float(norm_ppf(np.array(level))), float(norm_ppf(np.array(1.0 - (1.0 - level) / 2.0)))
    corr = cov[np.ix_(ok, ok)] / np.outer(sd[ok], sd[ok])
    w = rng.standard_normal((CRITICAL_DRAWS, int(ok.sum()))) @ _sqrt_psd(corr).T
    return float(np.quantile(w.max(axis=1), level)), float(np.quantile(np.abs(w).max(axis=1), level))


def beat_curves(s: np.ndarray, d: np.ndarray, root: np.ndarray, budgets, z: np.ndarray) -> dict[str, np.ndarray]:
    """``(B,)`` curves of the rule on fresh sets of each budget for one truth ``(s, d)`` (k,):
    ``p_beat``, ``p_worse``, ``p_final`` and ``gain`` (pp). ``root`` (k, k) is a square root of the
    per-item signal covariance, ``z`` (M, k) standard normal draws shared by every budget
    (common random numbers: the curves are smooth in the budget)."""
    noise = z @ root.T  # (M, k) per-item-scale noise
    scale = 1.0 / np.sqrt(np.asarray(budgets, dtype=np.float64))  # (B,)
    out = np.empty((4, len(scale)))
    step = max(1, BEAT_CELLS // max(1, noise.size))  # budgets per chunk: bounds memory
    for a in range(0, len(scale), step):
        vals = s[None, None, :] + noise[None, :, :] * scale[a : a + step, None, None]  # (b, M, k)
        pick = vals.argmax(axis=2)  # (b, M)
        keep = np.take_along_axis(vals, pick[..., None], axis=2)[..., 0] > 0.0
        gap = d[pick]  # (b, M)
        out[:, a : a + step] = [
            100.0 * np.where(keep, gap, 0.0).mean(axis=1),
            (keep & (gap > 0)).mean(axis=1),
            (keep & (gap < 0)).mean(axis=1),
            1.0 - keep.mean(axis=1),
        ]
    return dict(zip(("gain", "p_beat", "p_worse", "p_final"), out, strict=True))


def calibrated_curves(m: PilotMoments, budgets, draws: int, level: float, seed: int, stream: int = 0, lower_sides: int = 1) -> dict:
    """The box promise of the module docstring for one pilot's moments ``m``: the ``(B,)``
    curves at the least favourable truth of the level-``level`` simultaneous box, the
    pilot-as-truth ``p_beat_point`` (B,), the critical values of the lower bounds
    (``critical``: one-sided; ``lower_sides=2``, the earlier rule: two-sided) and of the
    upper bounds (``critical_upper``: two-sided) and the gap bounds (pp, k each). Draws:
    ``[seed, PLAN_PROMISE, stream, 0]`` (M = ``draws`` fresh-set noises, (M, k)) and
    ``[..., 1]`` (the critical values)."""
    k = len(m.d_hat)
    z = streams.generator(seed, streams.PLAN_PROMISE, stream, 0).standard_normal((draws, k))
    root = _sqrt_psd(m.items * m.v_s)
    box = m.v_d if m.same else np.block([[m.v_s, m.v_sd], [m.v_sd.T, m.v_d]])
    c, c2 = simultaneous_critical(box, level, streams.generator(seed, streams.PLAN_PROMISE, stream, 1))
    if lower_sides == 2:
        c = c2  # the earlier rule: two-sided lower bounds too
    se_d = np.sqrt(np.clip(np.diag(m.v_d), 0.0, None))
    lo, hi = m.d_hat - c * se_d, m.d_hat + c2 * se_d
    if m.clusters < MIN_PROMISE_CLUSTERS:  # a zero variance from 1-9 clusters is no certainty
        lo = np.full(k, -np.inf)
    beater = lo > 0
    d_w = np.where(beater, lo, np.minimum(hi, 0.0))
    if m.same:
        s_w = d_w
    else:
        se_s = np.sqrt(np.clip(np.diag(m.v_s), 0.0, None))
        s_w = np.where(beater, m.s_hat - c * se_s, m.s_hat + c2 * se_s)
    out = beat_curves(s_w, d_w, root, budgets, z)
    out["p_beat_point"] = beat_curves(m.s_hat, m.d_hat, root, budgets, z)["p_beat"]
    out["critical"] = c
    out["critical_upper"] = c2
    out["gap_bounds_pp"] = np.stack([100.0 * lo, 100.0 * hi], axis=1)  # (k, 2)
    return out


# --------------------------------------------------------------------------- pilot resampling


def pilot_curves(
    signal: np.ndarray,
    correct: np.ndarray,
    groups: np.ndarray,
    maximize: bool,
    budgets: tuple[int, ...] | np.ndarray,
    draws: int,
    seed: int,
    stream: int = 0,
    method: str = "pilot",
) -> dict[str, np.ndarray]:
    """``(B,)`` curves of one trajectory's pilot: ``gain`` (pp), ``p_beat``, ``p_worse``,
    ``p_final``.

    ``signal`` (T, n) is what the rule sums over the chosen items (correct / agreeing
    indicators, or NLL sums when ``maximize`` is False), ``correct`` (T, n) the correctness that
    defines the pilot truth, ``groups`` (n,) the clusters.

    ``method="pilot"``: choices on resamples of the whole pilot, scored by the whole pilot's
    accuracies (the pilot's noise is taken as truth). ``method="split"`` (cross-fitting): the
    pilot's clusters are split at random into two halves; choices are made on resamples of one
    half and scored by the accuracies of the *other* half, both ways round, averaged. The
    half that scores the choice is independent of the half that made it, so a checkpoint that
    only looks better by the pilot's luck is not counted as a true gain (see
    ``benchmarks/bench_plan.py``). Budget ``b`` uses chunks of draws from
    ``default_rng([seed, PLAN_DRAWS, stream, b_index, chunk])`` (split: ``[..., chunk, half]``).
    """
    if method not in ("split", "pilot"):
        raise CkptselError(f"pilot_curves: unknown resampling method {method!r} (split or pilot)")
    signal = np.asarray(signal, dtype=np.float64)
    correct = np.asarray(correct, dtype=np.float64)
    if method == "pilot":
        return _curves(signal, groups, correct, maximize, budgets, draws, (seed, streams.PLAN_DRAWS, stream))
    clusters = Clusters.of(groups)
    codes, G = clusters.codes, clusters.count
    if G < 2:
        raise CkptselError("plan --method split: the pilot needs at least 2 clusters of items")
    order = streams.generator(seed, streams.PLAN_HALVES, stream).permutation(G)
    first_half = np.zeros(G, dtype=bool)
    first_half[order[: G // 2]] = True
    in_a = first_half[codes]  # (n,) items of the first half
    parts = []
    for h, (choose, score) in enumerate(((in_a, ~in_a), (~in_a, in_a))):
        parts.append(
            _curves(
                signal[:, choose],
                np.asarray(groups)[choose],
                correct[:, score],
                maximize,
                budgets,
                draws,
                (seed, streams.PLAN_DRAWS, stream),
                half=h,
            )
        )
    return {k: (parts[0][k] + parts[1][k]) / 2.0 for k in parts[0]}


def _curves(
    signal: np.ndarray,
    groups: np.ndarray,
    truth: np.ndarray,
    maximize: bool,
    budgets,
    draws: int,
    key: tuple[int, ...],
    half: int | None = None,
) -> dict[str, np.ndarray]:
    """Choices on resamples of ``signal`` (T, n) (clusters ``groups``), scored by the accuracies
    of ``truth`` (T, m): one matrix product per budget and chunk of draws."""
    T, n = signal.shape
    clusters = Clusters.of(groups)
    G = clusters.count
    sig_g = clusters.sums(signal.T).T  # (T, G)
    first = core.first_identical_row(sig_g)  # identical checkpoints must tie exactly
    unique = np.flatnonzero(first == np.arange(T))
    counts = truth.sum(axis=1)  # (T,) exact integers in float64
    gain_t = 100.0 * (counts - counts[-1]) / truth.shape[1]
    beat_t = (counts > counts[-1]).astype(np.float64)
    worse_t = (counts < counts[-1]).astype(np.float64)
    final_t = np.zeros(T)
    final_t[-1] = 1.0
    per_t = np.stack([gain_t, beat_t, worse_t, final_t])  # (4, T)
    out = np.zeros((len(budgets), 4))
    for k, b in enumerate(budgets):
        m = max(1, int(round(b * G / n)))  # clusters per draw: b items on average
        total = np.zeros(4)
        suffix = () if half is None else (half,)
        for _, C in chunked_counts(G, draws, (*key, k), size=m, suffix=suffix):
            scores = np.zeros((T, C.shape[0]))
            scores[unique] = sig_g[unique] @ C.T
            p = core.tie_probabilities(scores[first], maximize=maximize)  # (T, chunk)
            total += (per_t @ p).sum(axis=1)
        out[k] = total / draws
    return {"gain": out[:, 0], "p_beat": out[:, 1], "p_worse": out[:, 2], "p_final": out[:, 3]}


def _signal(v, rule: str) -> np.ndarray:
    if rule == "accuracy":
        return v.correct
    if rule == "agreement":
        return core.plurality_agreement(v.answers)
    if MATCHED_WINDOW not in v.nll:
        raise CkptselError(f"--rule nll: trajectory {v.trajectory!r} has no matched-window validation NLL records")
    return v.nll[MATCHED_WINDOW]


def plan_from_pilot(
    records_dir: Path, trajectories: list[str] | None = None, *, rule: str = "accuracy", settings: PlanSettings | None = None
) -> dict:
    """The pilot plan (module docstring), averaged over the chosen trajectories (equal weight):
    per budget the promised curves, the planned budget or the answer that none reaches the
    target (``reaches_target``, ``max_promise`` and its budget, ``answer``)."""
    settings = settings or PlanSettings()
    if rule not in PLAN_RULES:
        raise CkptselError(f"unknown rule {rule!r}; choose from {list(PLAN_RULES)}")
    validation = load_validation(Path(records_dir))
    known = {v.trajectory: v for v in validation}
    names = list(trajectories) if trajectories else sorted(known)
    for t in names:
        if t not in known:
            raise CkptselError(f"{records_dir}: trajectory {t!r} has no validation records (known: {', '.join(sorted(known)[:10])})")
    budgets = tuple(int(b) for b in settings.budgets)
    per_traj, curves = {}, []
    for j, t in enumerate(names):
        v = known[t]
        if len(v.steps) < 2:
            raise CkptselError(f"trajectory {t!r}: one checkpoint only; nothing to choose")
        c, extra = _trajectory_curves(v, rule, settings, budgets, stream=j)
        curves.append(np.stack([c[key] for key in CURVES]))
        acc = 100.0 * v.correct.mean(axis=1)
        per_traj[t] = {
            "pilot_items": len(v.item_ids),
            "pilot_clusters": Clusters.of(v.groups).count,
            "checkpoints": len(v.steps),
            "final_accuracy": round(float(acc[-1]), 6),
            "best_pilot_gain": round(float(acc.max() - acc[-1]), 6),
            "gain": [round(float(x), 6) for x in c["gain"]],
            "p_beat": [round(float(x), 6) for x in c["p_beat"]],
            **extra,
        }
    mean = np.mean(curves, axis=0)  # (len(CURVES), B): equal weight per trajectory
    pilot = min(p["pilot_items"] for p in per_traj.values())
    # the items a choice is made from: half of the pilot with the split method
    base = pilot / 2 if settings.method == "split" else pilot
    rows = [
        {"budget": b}
        | {key: round(float(mean[i, k]), 6) for i, key in enumerate(CURVES) if np.isfinite(mean[i, k])}
        | {"extrapolation": round(b / base, 4)}
        for k, b in enumerate(budgets)
    ]
    planned = _planned(rows, settings.target)
    best = max(range(len(rows)), key=lambda k: (rows[k]["p_beat"], -k))
    return {
        "rule": rule,
        "trajectories": per_traj,
        "pilot_items": pilot,
        "settings": asdict(settings) | {"budgets": list(budgets)},
        "rows": rows,
        "planned_budget": planned,
        "reaches_target": planned is not None,
        "max_promise": rows[best]["p_beat"],
        "max_promise_budget": rows[best]["budget"],
        "answer": _answer(settings, planned, rows[best]),
        **_power_left(settings, rows, planned, min(p["pilot_clusters"] for p in per_traj.values())),
    }


CURVES = ("gain", "p_beat", "p_worse", "p_final", "p_beat_point")


def _trajectory_curves(v, rule: str, settings: PlanSettings, budgets, stream: int) -> tuple[dict, dict]:
    """One trajectory's curves (``CURVES``; NaN where the method has none) and its extra facts."""
    signal, maximize = _signal(v, rule), MAXIMIZE[rule]
    if settings.method != "calibrated":
        c = pilot_curves(
            signal, v.correct, v.groups, maximize, budgets, settings.draws, settings.seed, stream=stream, method=settings.method
        )
        return c | {"p_beat_point": np.full(len(budgets), np.nan)}, {}
    m = PilotMoments.of(signal, v.correct, v.groups, maximize)
    if m.clusters < 2:
        raise CkptselError(
            f"plan: trajectory {v.trajectory!r}: the pilot needs at least 2 clusters "
            f"of items (it has {m.items} item(s) in {m.clusters} cluster(s))"
        )
    c = calibrated_curves(m, budgets, settings.draws, settings.level, settings.seed, stream)
    bounds = c["gap_bounds_pp"]
    return c, {
        "critical_value": round(float(c["critical"]), 6),
        "critical_value_upper": round(float(c["critical_upper"]), 6),
        "gap_bounds_pp": {
            str(int(s)): [round(float(a), 6) if np.isfinite(a) else None, round(float(b), 6)]
            for s, (a, b) in zip(v.steps[:-1], bounds, strict=True)
        },
        "confident_beaters": [int(s) for s, (a, _) in zip(v.steps[:-1], bounds, strict=True) if a > 0],
        "p_beat_point": [round(float(x), 6) for x in c["p_beat_point"]],
    }


def _answer(settings: PlanSettings, planned: int | None, best: dict) -> str:
    """The plan in one sentence."""
    what = "promised" if settings.method == "calibrated" else "estimated"
    conf = f" with {100 * settings.level:g}% confidence" if settings.method == "calibrated" else ""
    if planned is not None:
        return f"{planned} items: P(choice beats final) ≥ {settings.target:g} ({what}{conf})"
    return (
        f"no budget up to {max(settings.budgets)} reaches P(choice beats final) ≥ "
        f"{settings.target:g}; the most that can be {what} is {best['p_beat']:.2f} at "
        f"{best['budget']} items{conf}"
    )


def _planned(rows: list[dict], target: float, key: str = "p_beat") -> int | None:
    """The smallest budget whose probability of beating the final checkpoint (``key``) reaches
    ``target``."""
    for r in rows:
        if r.get(key, -1.0) >= target:
            return r["budget"]
    return None


def _power_left(settings: PlanSettings, rows: list[dict], safe: int | None, clusters: int) -> dict:
    """``safe_budget``, ``smallest_budget`` and ``power_left`` (module docstring): what the safe
    plan costs beside the smallest budget whose point estimate reaches the target."""
    key = "p_beat_point" if settings.method == "calibrated" else "p_beat"
    smallest = _planned(rows, settings.target, key)
    if safe is not None and (smallest is None or safe < smallest):
        smallest = safe  # the promise is the stronger statement
    at = {r["budget"]: r for r in rows}

    def point(b, k):
        return None if b is None else at[b].get(k)

    left = {
        "extra_items": None if safe is None or smallest is None else safe - smallest,
        "p_beat_point_at_smallest": point(smallest, key),
        "promise_at_smallest": point(smallest, "p_beat") if key == "p_beat_point" else None,
        "p_beat_point_at_safe": point(safe, key),
        "promise_at_safe": point(safe, "p_beat") if key == "p_beat_point" else None,
    }
    return {
        "safe_budget": safe,
        "smallest_budget": smallest,
        "power_left": left | {"note": _power_note(settings, rows, safe, smallest, left, clusters)},
    }


def _power_note(settings: PlanSettings, rows: list[dict], safe, smallest, left: dict, clusters: int) -> str:
    """``power_left["note"]``: the power the safe plan leaves on the table, in one sentence."""
    target, top = settings.target, max(settings.budgets)
    if settings.method != "calibrated":
        return f"method {settings.method}: estimates only, nothing is promised" + (
            "" if smallest is None else f"; the estimate reaches {target:g} at {smallest} items"
        )
    if smallest is None:
        most = max(r["p_beat_point"] for r in rows)
        return (
            f"even taken as exact the pilot gives P(choice beats final) < {target:g} at every "
            f"budget up to {top} (at most {most:.2f}): keep the final checkpoint"
        )
    likely = (
        f"the target may be met at {smallest} items (P(beat) {left['p_beat_point_at_smallest']:.2f} if the pilot were exact; not guaranteed"
    )
    if safe is None:
        few = (
            ""
            if clusters >= MIN_PROMISE_CLUSTERS
            else f" (a promise needs at least {MIN_PROMISE_CLUSTERS} clusters of pilot items; this pilot has {clusters})"
        )
        return (
            f"{likely}: {left['promise_at_smallest']:.2f} can be promised there); no budget up "
            f"to {top} can be promised{few}: a larger pilot would tell"
        )
    if safe == smallest:
        return f"the safe plan is the smallest: {safe} items meet the target either way"
    return (
        f"{likely}: {left['promise_at_smallest']:.2f} promised there); the safe plan asks for "
        f"{safe} items, {safe - smallest} more (P(beat) {left['p_beat_point_at_safe']:.2f} if "
        f"the pilot were exact)"
    )


# --------------------------------------------------------------------------- closed form
def closed_form(
    delta: float, agreement: float, budgets: tuple[int, ...] | np.ndarray, target: float = 0.8, level: float = CONFIDENCE
) -> dict:
    """Two checkpoints, A better than the final B by ``delta`` pp, same correctness on a
    fraction ``agreement`` of items: the module docstring's formulas, per budget."""
    d = delta / 100.0
    q = 1.0 - agreement
    if not 0.0 < agreement <= 1.0:
        raise CkptselError("--agreement must be in (0, 1]")
    if not 0.0 < d:
        raise CkptselError("--delta must be > 0 (pp by which the candidate beats the final)")
    if d > q:
        raise CkptselError(
            f"--delta {delta} pp is impossible with --agreement {agreement}: two checkpoints that "
            f"agree on {100 * agreement:.1f}% of items differ by at most {100 * q:.1f} pp"
        )
    if not 0.0 < target < 1.0 or not 0.0 < level < 1.0:
        raise CkptselError("--target and --confidence must be between 0 and 1")
    sigma = math.sqrt(max(q - d * d, 0.0))
    n = np.asarray(budgets, dtype=np.float64)
    z = d * np.sqrt(n) / sigma if sigma > 0 else np.full(len(n), np.inf)
    p_pick = norm_cdf(z)
    z_t = float(norm_ppf(np.array(target)))
    z_a = float(norm_ppf(np.array(1.0 - (1.0 - level) / 2.0)))
    n_pick = math.ceil((z_t * sigma / d) ** 2) if sigma > 0 else 1
    n_test = math.ceil(((z_a * math.sqrt(q) + z_t * sigma) / d) ** 2)
    k = z_a + z_t
    mde = k * math.sqrt(q) / np.sqrt(n + k * k)  # (B,) paired MDE (fraction)
    n_mde = math.ceil(k * k * (q - d * d) / (d * d))
    return {
        "delta": delta,
        "agreement": agreement,
        "discordant": round(q, 6),
        "sigma": round(sigma, 6),
        "target": target,
        "level": level,
        "rows": [
            {
                "budget": int(b),
                "p_pick": round(float(p), 6),
                "gain": round(float(delta * p), 6),
                "se": round(float(100.0 * sigma / math.sqrt(b)), 6),
                "mde": round(float(100.0 * e), 6),
                "detectable": bool(100.0 * e <= delta),
            }
            for b, p, e in zip(n.astype(int), p_pick, mde, strict=True)
        ],
        "budget_to_pick": n_pick,
        "budget_mde": n_mde,
        "budget_for_test": n_test,
        "planned_budget": n_mde,
    }


# --------------------------------------------------------------------------- exact McNemar power
EXACT_LIMIT = 100_000  # the largest number of items exact_items_needed searches
POWER_CELLS = 1 << 20  # (rows × window) cells per block of the exact power sums (~8 MB)
TAIL_SD, TAIL_PAD = 9.0, 30  # binomial mass beyond mean ± (9 sd + 30) is below 1e-17 (Bernstein)
P_TOLERANCE = 1e-12  # a p-value within this of α rejects (as stats.exact.exact_reason)


@dataclass(frozen=True)
class ItemsNeeded:
    """:func:`exact_items_needed`'s answer: ``items`` (None when there is none) with the exact
    power there, or ``note`` saying why there is no number."""

    items: int | None
    power: float | None = None
    note: str | None = None


def _log_factorials(n: int) -> np.ndarray:
    """``(n + 1,)`` log k! for k = 0..n (summed in extended precision where there is one)."""
    k = np.arange(1, n + 1, dtype=np.longdouble)
    return np.concatenate([[0.0], np.cumsum(np.log(k)).astype(np.float64)])


def _window(trials: np.ndarray, p: float) -> tuple[np.ndarray, np.ndarray]:
    """``(R,)`` ends of the counts where Binomial(trials, p) has its mass (mean ± 9 sd + 30)."""
    t = trials.astype(np.float64)
    pad = TAIL_SD * np.sqrt(t * p * (1.0 - p)) + TAIL_PAD
    lo = np.maximum(np.floor(t * p - pad), 0.0).astype(np.int64)
    return lo, np.minimum(np.ceil(t * p + pad).astype(np.int64), trials)


def _binomial_blocks(trials: np.ndarray, p: float, lo: np.ndarray, hi: np.ndarray, lf: np.ndarray):
    """Blocks ``(rows, j, pmf)`` over the ``(R,)`` rows (``trials`` ascending): ``j`` (r, W) the
    counts ``lo_r, lo_r + 1, …`` and ``pmf`` (r, W) Binomial(trials_r, p) there, 0 outside
    ``[lo_r, hi_r] ∩ [0, trials_r]``; about :data:`POWER_CELLS` cells a block. ``lf``: log
    factorials up to ``max(trials)``. ``log pmf = lf[t] + t log(1−p) + (j log(p/(1−p)) − lf[j])
    − lf[t − j]``: the last two read as rows of sliding windows (contiguous copies)."""
    widths = hi - lo + 1
    wide = int(widths.max(initial=1))
    if 0.0 < p < 1.0:
        k = np.arange(len(lf), dtype=np.float64)
        row = lf + k * math.log1p(-p)  # (T + 1,) the part of log pmf that depends on t only
        ahead = np.concatenate([k * math.log(p / (1.0 - p)) - lf, np.full(wide, -np.inf)])
        behind = np.concatenate([np.full(wide, np.inf), lf])[::-1]  # lf[x] = behind[len - 1 - wide - x]
        ahead_w = sliding_window_view(ahead, wide)
        behind_w = sliding_window_view(behind, wide)
    start, R = 0, len(trials)
    while start < R:
        stop = min(R, start + max(1, POWER_CELLS // max(int(widths[start]), 1)))
        while stop - start > 1 and (stop - start) * int(widths[start:stop].max()) > 2 * POWER_CELLS:
            stop = start + (stop - start) // 2
        W = int(widths[start:stop].max())
        t, low, top = trials[start:stop], lo[start:stop], hi[start:stop]
        j = low[:, None] + np.arange(W)
        keep = j <= np.minimum(top, t)[:, None]
        if 0.0 < p < 1.0:
            # lf[t − j] = behind[len − 1 − wide − t + j]: the window from len − 1 − wide − t + lo
            log = row[t][:, None] + ahead_w[low, :W] - behind_w[len(behind) - 1 - wide - t + low, :W]
            pmf = np.exp(np.where(keep, log, -np.inf))
        else:  # all mass at 0 (p = 0) or at t (p = 1)
            pmf = (keep & (j == (t[:, None] if p >= 1.0 else 0))).astype(np.float64)
        yield slice(start, stop), j, pmf
        start = stop


def mcnemar_critical(m: np.ndarray, level: float, lf: np.ndarray | None = None) -> np.ndarray:
    """``(M,)`` critical values of the exact two-sided McNemar test at ``1 − level``, for ``m``
    (M,) discordant items each: the largest ``c`` with ``2 P(Bin(m, 1/2) ≤ c) ≤ α`` (−1 when it
    never rejects). The test (:func:`ckptsel.stats.mcnemar_exact`) rejects ``(only_a, only_b)``
    iff ``min(only_a, only_b) ≤ c_{only_a + only_b}``. ``lf``: log factorials up to ``max(m)``."""
    m = np.asarray(m, dtype=np.int64).reshape(-1)
    lf = _log_factorials(int(m.max(initial=0))) if lf is None else lf
    alpha = 1.0 - level + P_TOLERANCE
    lo = np.maximum(np.floor(m / 2 - TAIL_SD / 2 * np.sqrt(m) - TAIL_PAD), 0).astype(np.int64)
    c = np.empty(len(m), dtype=np.int64)
    for rows, _, pmf in _binomial_blocks(m, 0.5, lo, m // 2, lf):  # P(≤ m/2) ≥ 1/2 > α/2
        c[rows] = lo[rows] + (2.0 * np.cumsum(pmf, axis=1) <= alpha).sum(axis=1) - 1
    return c


def _rejection(m: np.ndarray, theta: float, level: float, lf: np.ndarray) -> np.ndarray:
    """``(M,)`` P(the exact test rejects) given ``m`` (M,) discordant items, each "only A" with
    probability ``theta``: ``P(X ≤ c_m) + P(X ≥ m − c_m)``, ``X ~ Bin(m, theta)``."""
    c = mcnemar_critical(m, level, lf)
    lo, hi = _window(m, theta)
    r = np.zeros(len(m))
    for rows, j, pmf in _binomial_blocks(m, theta, lo, hi, lf):
        cc = c[rows, None]
        r[rows] = (pmf * ((j <= cc) | (j >= m[rows, None] - cc))).sum(axis=1)
    return r


def mcnemar_power(n, p_a: float, p_b: float, level: float = CONFIDENCE) -> np.ndarray:
    """``(len(n),)`` exact power of the two-sided exact McNemar test at ``1 − level`` (the test
    ``compare`` makes: reject when :func:`ckptsel.stats.mcnemar_exact` ≤ 1 − level) on ``n``
    independent items, each right for A only with probability ``p_a``, for B only with
    ``p_b``, else the same for both. ``n``: (N,) item counts ≥ 0, any order.

    ``power(n) = Σ_m Bin(n, p_a + p_b)(m) r(m)`` with ``r(m) = P(X ≤ c_m) + P(X ≥ m − c_m)``,
    ``X ~ Bin(m, p_a / (p_a + p_b))`` and ``c_m`` the test's critical values
    (:func:`mcnemar_critical`): log-space binomials summed over the counts where each has its
    mass (mean ± (9 sd + 30), the rest below 1e-17), in blocks of rows. The exact test's power is
    not monotone in ``n``."""
    n = np.asarray(n, dtype=np.int64).reshape(-1)
    if not (p_a >= 0.0 and p_b >= 0.0 and p_a + p_b <= 1.0 + 1e-12):
        raise CkptselError(f"mcnemar_power: p_a = {p_a}, p_b = {p_b} are not probabilities")
    if (n < 0).any():
        raise CkptselError(f"mcnemar_power: item counts must be >= 0, got {int(n.min())}")
    q = min(p_a + p_b, 1.0)
    out = np.zeros(len(n))
    if len(n) == 0 or q <= 0.0:
        return out
    order = np.argsort(n, kind="stable")
    ns = n[order]
    lf = _log_factorials(int(ns[-1]))
    lo, hi = _window(ns, q)
    m = np.arange(int(lo.min()), int(hi.max()) + 1)
    r = _rejection(m, min(p_a / q, 1.0), level, lf)
    power = np.zeros(len(ns))
    for rows, j, pmf in _binomial_blocks(ns, q, lo, hi, lf):
        power[rows] = (pmf * r[np.minimum(j, m[-1]) - m[0]]).sum(axis=1)
    out[order] = np.clip(power, 0.0, 1.0)
    return out


BERRY_ESSEEN = 0.4748  # Shevtsova (2011): |P(standardized iid sum ≤ x) − Φ(x)| ≤ C ρ / (σ³ √n)


def _phi_above(x: np.ndarray) -> np.ndarray:
    """An upper bound of Φ(x), elementwise: :func:`ckptsel.stats.norm_cdf` (``math.erfc``,
    within 1e-15) moved by 1e-12 to the safe side."""
    return np.minimum(1.0, norm_cdf(x) + 1e-12)


def _bernstein_bound(n: np.ndarray, big: float, small: float, level: float) -> np.ndarray:
    """``(N,)`` lower bounds of the power at ``n`` (N, 1) (:func:`mcnemar_power_bound`, with
    Hoeffding's ``z² = 2 ln(2/α)`` and Bernstein's inequality for ``P(Y < c/2)``)."""
    q, g = big + small, 2.0 * math.log(2.0 / (1.0 - level))
    c = np.maximum(np.sqrt(g * n * q) * np.array([0.75, 1.1]), 1e-9)  # (N, 2)
    kappa = g / (2.0 * c)
    mu = big - small - kappa * q  # E Y / n
    var = np.maximum(big * (1.0 - kappa) ** 2 + small * (1.0 + kappa) ** 2 - mu**2, 0.0)
    t = n * mu - c / 2.0
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        # |1 + κ + μ|: the most one item's y falls below its mean
        tail = np.exp(-(t**2) / (2.0 * (n * var + np.abs(1.0 + kappa + mu) * t / 3.0)))
    return np.where(t > 0, 1.0 - tail, 0.0).max(axis=1)


def _normal_bound(n: np.ndarray, big: float, small: float, level: float) -> np.ndarray:
    """``(N,)`` lower bounds of the power at ``n`` (N, 1) from Berry–Esseen, tight for large
    ``n``. With ``m₀ = ⌊nq − 6 sd⌋`` discordant items or more (Bernstein bounds the chance of
    fewer), ``2 P(Bin(m, 1/2) ≤ m/2 − z√m/2) ≤ 2 (Φ(−z) + C/√m₀) ≤ α`` for every ``m ≥ m₀``
    when ``Φ(−z) ≤ α/2 − C/√m₀`` (``z`` read at the grid value of ``m₀`` below it: larger, so
    safe); Berry–Esseen then bounds ``P(Y ≤ c/2)``."""
    q = big + small
    sd_m = np.sqrt(n * q * (1.0 - q))
    m0 = np.floor(n * q - 6.0 * sd_m)
    short = n * q - m0
    grid = np.unique(np.geomspace(1.0, max(float(m0.max()), 1.0), 256).astype(np.int64))
    room = (1.0 - level) / 2.0 - BERRY_ESSEEN / np.sqrt(grid)
    z_grid = -norm_ppf(np.clip(room, 1e-300, 0.5)) + 1e-9  # Φ(−z) ≤ room (norm_ppf: ~1e-15)
    at = np.searchsorted(grid, np.maximum(m0, 1.0), side="right") - 1
    z, usable = z_grid[at], (room[at] > 0) & (m0 >= 1)
    c = np.maximum(z * np.sqrt(n * q), 1e-9)  # (N, 1): z√m ≤ z² m / (2c) + c/2, equal at m = nq
    kappa = z * z / (2.0 * c)
    mu = big * (1.0 - kappa) - small * (1.0 + kappa)  # E y, y ∈ {1 − κ, −1 − κ, 0}
    d1, d2, d0 = np.abs(1.0 - kappa - mu), np.abs(1.0 + kappa + mu), np.abs(mu)
    sd = np.sqrt(big * d1**2 + small * d2**2 + (1.0 - q) * d0**2)
    rho = big * d1**3 + small * d2**3 + (1.0 - q) * d0**3
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        p_few = np.exp(-(short**2) / (2.0 * (sd_m**2 + short / 3.0)))  # P(m < m₀), Bernstein
        fail = _phi_above((c / 2.0 - n * mu) / (sd * np.sqrt(n))) + BERRY_ESSEEN * rho / (sd**3 * np.sqrt(n)) + p_few
    bound = np.where(usable & (sd > 0) & np.isfinite(fail), 1.0 - fail, 0.0)
    return bound.max(axis=1)


def mcnemar_power_bound(n, p_a: float, p_b: float, level: float = CONFIDENCE) -> np.ndarray:
    """``(len(n),)`` a lower bound of :func:`mcnemar_power` (``n``: (N,) item counts), cheap for
    any ``n``. With ``D`` = only A − only B and ``m`` discordant items (``p_a ≥ p_b``; the other
    way round by symmetry), the test rejects whenever ``D ≥ z √m`` for a ``z`` that bounds its
    critical values (Hoeffding's bound for Bin(m, 1/2): ``z² = 2 ln(2/α)``; or Berry–Esseen's,
    tighter for large ``m``); that holds when ``Y = D − z² m / (2c) ≥ c / 2`` (any ``c > 0``:
    ``z√m ≤ z² m / (2c) + c/2``), and Bernstein's inequality (or Berry–Esseen's, with
    Shevtsova's constant 0.4748) bounds ``P(Y < c/2)`` for the sum ``Y`` of ``n`` independent
    items. ``c`` is ``z √(n (p_a + p_b))`` (Berry–Esseen) or the better of two near it
    (Bernstein)."""
    n = np.asarray(n, dtype=np.float64).reshape(-1)[:, None]
    big, small = max(p_a, p_b), min(p_a, p_b)
    if big - small <= 0.0 or len(n) == 0:
        return np.zeros(len(n))
    bound = np.maximum(_bernstein_bound(n, big, small, level), _normal_bound(n, big, small, level))
    return np.clip(bound, 0.0, 1.0)


def exact_items_needed(
    only_a: int, only_b: int, items: int, level: float = CONFIDENCE, target: float = 0.8, limit: int = EXACT_LIMIT
) -> ItemsNeeded:
    """The fewest independent items from which on the exact McNemar test at ``1 − level`` has
    power ≥ ``target`` at every larger number up to ``limit``, at the observed discordance
    ``p_a = only_a / items``, ``p_b = only_b / items`` (:func:`mcnemar_power`).

    :func:`mcnemar_power_bound` certifies every ``n`` from some ``n_B`` up to ``limit`` at once;
    below ``n_B`` the exact power is computed in blocks of ``n`` going down until one falls
    short of ``target``: the answer is the ``n`` after the last that does. None, with a
    ``note``, when the observed difference is 0 (or the logs agree on every item) or when the
    power does not stay ≥ ``target`` up to ``limit`` ("over LIMIT items")."""
    check_int(items, "items", low=1)
    check_int(limit, "limit", low=1)
    for count, name in ((only_a, "only_a"), (only_b, "only_b")):
        check_int(count, name, low=0)
    if only_a + only_b == 0:
        return ItemsNeeded(None, note="the logs agree on every item")
    if only_a == only_b:
        return ItemsNeeded(None, note="no observed difference")
    p_a, p_b = only_a / items, only_b / items
    certified = mcnemar_power_bound(np.arange(1, limit + 1), p_a, p_b, level) >= target
    # n_B: the first n from which the bound certifies every n up to limit (limit + 1: none)
    n_b = 1 if certified.all() else limit + 1 - int(np.argmin(certified[::-1]))
    top, answer, power, size = n_b - 1, 1, None, 256
    while top >= 1:
        low = max(1, top - size + 1)
        block = mcnemar_power(np.arange(low, top + 1), p_a, p_b, level)
        short = np.flatnonzero(block < target)
        if len(short):
            answer = low + int(short[-1]) + 1
            power = None if answer > top else float(block[answer - low])
            break
        top, size = low - 1, 2 * size
    if answer > limit:
        return ItemsNeeded(None, note=f"over {limit} items")
    if power is None:
        power = float(mcnemar_power([answer], p_a, p_b, level)[0])
    return ItemsNeeded(answer, round(power, 6))


# --------------------------------------------------------------------------- figure
def plan_figure(pilot: dict | None, closed: dict | None):
    """Expected gain and probability of beating the final checkpoint against the budget."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 3.8))
    ax1, ax2 = fig.subplots(1, 2)
    if pilot is not None:
        b = [r["budget"] for r in pilot["rows"]]
        ax1.plot(b, [r["gain"] for r in pilot["rows"]], "o-", color="#1f77b4", label=f"pilot resampling ({pilot['rule']})")
        ax2.plot(b, [r["p_beat"] for r in pilot["rows"]], "o-", color="#1f77b4", label="P(choice beats final), pilot")
        ax2.plot(b, [r["p_worse"] for r in pilot["rows"]], "v:", color="#d62728", label="P(choice worse than final), pilot")
        for ax in (ax1, ax2):
            ax.axvline(pilot["pilot_items"], color="grey", linestyle="--", linewidth=1)
            ax.axvspan(
                pilot["pilot_items"], max(b[-1], pilot["pilot_items"]), color="grey", alpha=0.12, label="beyond the pilot (extrapolated)"
            )
        ax2.axhline(pilot["settings"]["target"], color="black", linewidth=0.8)
    if closed is not None:
        b = [r["budget"] for r in closed["rows"]]
        lab = f"closed form δ={closed['delta']:g} pp, agreement {closed['agreement']:g}"
        ax1.plot(b, [r["gain"] for r in closed["rows"]], "s--", color="#2ca02c", label=lab)
        ax2.plot(b, [r["p_pick"] for r in closed["rows"]], "s--", color="#2ca02c", label=lab)
        ax2.axhline(closed["target"], color="black", linewidth=0.8)
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("validation budget (items)")
        ax.grid(alpha=0.3)
    ax1.axhline(0.0, color="black", linewidth=0.8)
    ax1.set_ylabel("expected gain over final (pp)")
    ax2.set_ylabel("probability")
    ax2.set_ylim(-0.02, 1.02)
    ax1.legend(fontsize=7, loc="best")
    ax2.legend(fontsize=7, loc="best")
    fig.suptitle("ckptsel plan: what a validation budget buys")
    fig.tight_layout()
    return fig
