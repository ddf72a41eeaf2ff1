"""``ckptsel plan``: how many validation items does a selection rule need?

Two answers.

**From pilot records** (one or more trajectories measured on some validation items). The
pilot pool stands in for the population of validation items: a checkpoint's "true" accuracy is
its accuracy on the whole pilot pool. For each budget ``n`` the rule chooses on ``draws``
resampled validation sets of about ``n`` items (items sharing a ``group`` are drawn as one
cluster: ``round(n · G / N)`` of the ``G`` clusters are drawn with replacement, so a set holds
``n`` items on average), and the choice (uniform over exact ties) is scored on the pilot:

* ``gain`` — the expected gain of the rule's choice over the final checkpoint (pp);
* ``p_beat`` / ``p_worse`` — the probability that the choice is strictly better / worse than
  the final checkpoint on the pilot pool (a choice that ties the final one counts in neither).

Budgets beyond the pilot size ``N`` draw more items than the pilot holds (with replacement):
the pilot's accuracy differences are then taken as exact, which they are not; the output
says how far each budget extrapolates (``n / N``). Scored on the pilot itself
(``method="pilot"``) the pilot's own noise makes small true gaps look like real ones, so
``p_beat`` is optimistic; the default ``method="split"`` chooses on one half of the pilot's
clusters and scores on the other (both ways), which makes fewer false plans and is
conservative when the gain is real (``benchmarks/bench_plan.py`` measures both).

**Closed form from assumed inputs** (Card et al. 2020; Miller 2024) for two checkpoints, A
better than the final checkpoint B by ``δ`` (pp), that give the same correctness on a fraction
``ρ`` of items (agreement rate). With the discordant fraction ``q = 1 − ρ`` the per-item paired
difference has variance ``σ² = q − δ²`` and, by the normal approximation,

* ``P(the rule picks A on n items) = Φ(δ √n / σ)`` (ties split evenly), expected gain
  ``δ · P``; the budget for ``P ≥ π`` is ``n = (z_π σ / δ)²``;
* the paired standard error of the accuracy difference is ``σ / √n`` (Miller 2024);
* the budget for a two-sided paired (McNemar) test at level ``α`` to detect ``δ`` with power
  ``π`` is ``n = (z_{1−α/2} √q + z_π σ)² / δ²`` (Connor 1987), the power question of Card et al.

Everything is vectorized: one counts matrix (draws × clusters) and one matrix product per
budget and chunk of draws.
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
PLAN_METHODS = ("split", "pilot")
MAXIMIZE = {"accuracy": True, "agreement": True, "nll": False}


@dataclass(frozen=True)
class PlanSettings:
    """Budgets to plan for, resampling draws, seed, the target probability of beating the final
    checkpoint, and the pilot method (validated when built)."""

    budgets: tuple[int, ...] = field(default_factory=lambda: default_budgets(defaults.PLAN_MAX_BUDGET))
    draws: int = defaults.PLAN_DRAWS
    seed: int = defaults.SEED
    target: float = defaults.PLAN_TARGET  # P(beat final) a planned budget must reach
    method: str = "split"  # "split": choose on one half of the pilot, score on the other; "pilot"

    def __post_init__(self) -> None:
        check_int(self.draws, "--draws", low=defaults.MIN_DRAWS, high=defaults.MAX_DRAWS)
        check_seed(self.seed)
        check_level(self.target, "--target")
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
    if method not in PLAN_METHODS:
        raise CkptselError(f"unknown plan method {method!r}; choose from {list(PLAN_METHODS)}")
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
    """The pilot-resampling plan (module docstring), averaged over the chosen trajectories."""
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
    per_traj = {}
    curves = []
    for j, t in enumerate(names):
        v = known[t]
        if len(v.steps) < 2:
            raise CkptselError(f"trajectory {t!r}: one checkpoint only; nothing to choose")
        c = pilot_curves(
            _signal(v, rule), v.correct, v.groups, MAXIMIZE[rule], budgets,
            settings.draws, settings.seed, stream=j, method=settings.method,
        )  # fmt: skip
        curves.append(np.stack([c["gain"], c["p_beat"], c["p_worse"], c["p_final"]]))
        acc = 100.0 * v.correct.mean(axis=1)
        per_traj[t] = {
            "pilot_items": len(v.item_ids),
            "pilot_clusters": Clusters.of(v.groups).count,
            "checkpoints": len(v.steps),
            "final_accuracy": round(float(acc[-1]), 6),
            "best_pilot_gain": round(float(acc.max() - acc[-1]), 6),
            "gain": [round(float(x), 6) for x in c["gain"]],
            "p_beat": [round(float(x), 6) for x in c["p_beat"]],
        }
    mean = np.mean(curves, axis=0)  # (4, B): equal weight per trajectory
    pilot = min(p["pilot_items"] for p in per_traj.values())
    # the items a choice is made from: half of the pilot with the split method
    base = pilot / 2 if settings.method == "split" else pilot
    rows = [
        {
            "budget": b,
            "gain": round(float(mean[0, k]), 6),
            "p_beat": round(float(mean[1, k]), 6),
            "p_worse": round(float(mean[2, k]), 6),
            "p_final": round(float(mean[3, k]), 6),
            "extrapolation": round(b / base, 4),
        }
        for k, b in enumerate(budgets)
    ]
    return {
        "rule": rule,
        "trajectories": per_traj,
        "pilot_items": pilot,
        "settings": asdict(settings) | {"budgets": list(budgets)},
        "rows": rows,
        "planned_budget": _planned(rows, settings.target),
    }


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
            }
            for b, p in zip(n.astype(int), p_pick, strict=True)
        ],
        "budget_to_pick": n_pick,
        "budget_for_test": n_test,
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
