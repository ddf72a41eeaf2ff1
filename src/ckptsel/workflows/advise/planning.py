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
* the promise is that probability at the *least favourable truth* in the simultaneous
  two-sided box of level ``level`` around (ŝ, d̂) (max-|t| critical value by Gaussian draws with
  the pilot's correlation): checkpoints whose gap is confidently > 0 (``L_t > 0``) sit at their
  lower bounds, every other checkpoint is a non-beater as strong as the box allows (gap
  ``min(U_t, 0)``, signal at its upper bound). With probability ≥ ``level`` the truth lies in the
  box, so when the final checkpoint is the best a plan is made with probability ≤ 1 − level,
  whatever the budget;
* the planned budget is the smallest whose promise reaches ``target``; otherwise the answer is
  "no budget up to the largest reaches the target", with the largest promise and its budget.

The pilot-as-truth curve (``p_beat_point``: the same formula at (ŝ, d̂)) is reported beside the
promise. ``benchmarks/bench_plan.py`` measures the calibration on truth-known scenarios.

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

Everything is vectorized: one (draws × checkpoints) matrix of normal draws per trajectory and
one argmax per budget (calibrated); one counts matrix and one matrix product per budget and
chunk of draws (resampling).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ckptsel import defaults
from ckptsel._util import rng as streams
from ckptsel._util.checks import check_choice, check_int, check_level, check_seed
from ckptsel.choose import core
from ckptsel.defaults import CONFIDENCE
from ckptsel.errors import CkptselError
from ckptsel.records import MATCHED_WINDOW, load_validation
from ckptsel.stats import Clusters, chunked_counts, norm_cdf, norm_ppf

PLAN_RULES = ("accuracy", "agreement", "nll")
PLAN_METHODS = ("calibrated", "split", "pilot")
CRITICAL_DRAWS = 10_000  # Gaussian draws for the box's simultaneous critical value
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
    sd = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    ok = sd > 0
    if not ok.any():
        return float(norm_ppf(np.array(1.0 - (1.0 - level) / 2.0)))
    corr = cov[np.ix_(ok, ok)] / np.outer(sd[ok], sd[ok])
    w = rng.standard_normal((CRITICAL_DRAWS, int(ok.sum()))) @ _sqrt_psd(corr).T
    return float(np.quantile(np.abs(w).max(axis=1), level))


def beat_curves(
    s: np.ndarray, d: np.ndarray, root: np.ndarray, budgets, z: np.ndarray
) -> dict[str, np.ndarray]:
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


def calibrated_curves(
    m: PilotMoments, budgets, draws: int, level: float, seed: int, stream: int = 0
) -> dict:
    """The box promise of the module docstring for one pilot's moments ``m``: the ``(B,)``
    curves at the least favourable truth of the level-``level`` simultaneous box, the
    pilot-as-truth ``p_beat_point`` (B,), the critical value and the gap bounds (pp, k each).
    Draws: ``[seed, PLAN_PROMISE, stream, 0]`` (M = ``draws`` fresh-set noises, (M, k)) and
    ``[..., 1]`` (the critical value)."""
    k = len(m.d_hat)
    z = streams.generator(seed, streams.PLAN_PROMISE, stream, 0).standard_normal((draws, k))
    root = _sqrt_psd(m.items * m.v_s)
    box = m.v_d if m.same else np.block([[m.v_s, m.v_sd], [m.v_sd.T, m.v_d]])
    c = max_abs_t_critical(box, level, streams.generator(seed, streams.PLAN_PROMISE, stream, 1))
    se_d = np.sqrt(np.clip(np.diag(m.v_d), 0.0, None))
    lo, hi = m.d_hat - c * se_d, m.d_hat + c * se_d
    beater = lo > 0
    d_w = np.where(beater, lo, np.minimum(hi, 0.0))
    if m.same:
        s_w = d_w
    else:
        se_s = np.sqrt(np.clip(np.diag(m.v_s), 0.0, None))
        s_w = np.where(beater, m.s_hat - c * se_s, m.s_hat + c * se_s)
    out = beat_curves(s_w, d_w, root, budgets, z)
    out["p_beat_point"] = beat_curves(m.s_hat, m.d_hat, root, budgets, z)["p_beat"]
    out["critical"] = c
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
            _curves(signal[:, choose], np.asarray(groups)[choose], correct[:, score], maximize,
                    budgets, draws, (seed, streams.PLAN_DRAWS, stream), half=h)
        )  # fmt: skip
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
        raise CkptselError(
            f"--rule nll: trajectory {v.trajectory!r} has no matched-window validation NLL records"
        )
    return v.nll[MATCHED_WINDOW]


def plan_from_pilot(
    records_dir: Path,
    trajectories: list[str] | None = None,
    *,
    rule: str = "accuracy",
    settings: PlanSettings | None = None,
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
            raise CkptselError(
                f"{records_dir}: trajectory {t!r} has no validation records "
                f"(known: {', '.join(sorted(known)[:10])})"
            )
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
    }


CURVES = ("gain", "p_beat", "p_worse", "p_final", "p_beat_point")


def _trajectory_curves(v, rule: str, settings: PlanSettings, budgets, stream: int) -> tuple[dict, dict]:
    """One trajectory's curves (``CURVES``; NaN where the method has none) and its extra facts."""
    signal, maximize = _signal(v, rule), MAXIMIZE[rule]
    if settings.method != "calibrated":
        c = pilot_curves(signal, v.correct, v.groups, maximize, budgets, settings.draws,
                         settings.seed, stream=stream, method=settings.method)  # fmt: skip
        return c | {"p_beat_point": np.full(len(budgets), np.nan)}, {}
    m = PilotMoments.of(signal, v.correct, v.groups, maximize)
    c = calibrated_curves(m, budgets, settings.draws, settings.level, settings.seed, stream)
    bounds = c["gap_bounds_pp"]
    return c, {
        "critical_value": round(float(c["critical"]), 6),
        "gap_bounds_pp": {
            str(int(s)): [round(float(a), 6), round(float(b), 6)]
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
        return (f"{planned} items: P(choice beats final) ≥ {settings.target:g} ({what}{conf})")
    return (
        f"no budget up to {max(settings.budgets)} reaches P(choice beats final) ≥ "
        f"{settings.target:g}; the most that can be {what} is {best['p_beat']:.2f} at "
        f"{best['budget']} items{conf}"
    )


def _planned(rows: list[dict], target: float) -> int | None:
    """The smallest budget whose probability of beating the final checkpoint reaches ``target``."""
    for r in rows:
        if r["p_beat"] >= target:
            return r["budget"]
    return None


# --------------------------------------------------------------------------- closed form
def closed_form(
    delta: float,
    agreement: float,
    budgets: tuple[int, ...] | np.ndarray,
    target: float = 0.8,
    level: float = CONFIDENCE,
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


# --------------------------------------------------------------------------- figure
def plan_figure(pilot: dict | None, closed: dict | None):
    """Expected gain and probability of beating the final checkpoint against the budget."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 3.8))
    ax1, ax2 = fig.subplots(1, 2)
    if pilot is not None:
        b = [r["budget"] for r in pilot["rows"]]
        ax1.plot(b, [r["gain"] for r in pilot["rows"]], "o-", color="#1f77b4",
                 label=f"pilot resampling ({pilot['rule']})")  # fmt: skip
        ax2.plot(b, [r["p_beat"] for r in pilot["rows"]], "o-", color="#1f77b4",
                 label="P(choice beats final), pilot")  # fmt: skip
        ax2.plot(b, [r["p_worse"] for r in pilot["rows"]], "v:", color="#d62728",
                 label="P(choice worse than final), pilot")  # fmt: skip
        for ax in (ax1, ax2):
            ax.axvline(pilot["pilot_items"], color="grey", linestyle="--", linewidth=1)
            ax.axvspan(pilot["pilot_items"], max(b[-1], pilot["pilot_items"]), color="grey",
                       alpha=0.12, label="beyond the pilot (extrapolated)")  # fmt: skip
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
