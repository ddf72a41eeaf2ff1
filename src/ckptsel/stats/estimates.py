"""Statistics over scored trajectories: point estimates, bootstrap intervals, descriptives.

Turns a :class:`~ckptsel.choose.ScoredChoices` into the typed :class:`ckptsel.results.Summary`
(whose ``to_dict()`` is ``summary.json``, SPEC §12, schema 1) plus per-trajectory and
per-configuration tables. Pure computation; no I/O. Blocks iterate over
:data:`ckptsel.choose.RULES`; every estimate is a :class:`ckptsel.results.Estimate` as stored.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ckptsel import defaults
from ckptsel._util import rng as streams
from ckptsel._util.checks import check_choice, check_int, check_level, check_seed
from ckptsel.choose.evaluate import MH_RULES, MH_STATS, Name, ScoredChoices
from ckptsel.choose.rules import RULES
from ckptsel.choose.settings import BUDGET_LABELS, FULL, OV_LABELS, labels_of
from ckptsel.defaults import THINNING
from ckptsel.results.estimate import Estimate
from ckptsel.results.summary import (
    NO_NLL_COMPLETE,
    BudgetCell,
    Gains,
    MatchedHalf,
    NllControl,
    Population,
    QuestionBootstrap,
    Sensitivities,
    SignalNoise,
    SignCounts,
    Summary,
    TaskPopulation,
    TaskResult,
)
from ckptsel.stats import bootstrap as bs
from ckptsel.stats import exact as ex
from ckptsel.stats import intervals as iv
from ckptsel.stats.noise import signal_and_noise
from ckptsel.stats.resample import Clusters

# Per interval method: (K, what was measured below it). K is the smallest number of
# configurations from which the configuration interval covered >= 90% of its estimand in every
# scenario of benchmarks/bench_coverage.py (K = 2, 3, 4, 8, 16, 26; BENCHMARKS.md); fewer
# configurations than K -> a caution quoting the measurement. One configuration never gives a
# configuration-level interval (there is no spread to see), whatever the method.
# below: two configurations' wild draws are degenerate (intervals.wild_t_stats)
WILD_MIN_CONFIGURATIONS = 3
FEW_CONFIGURATIONS = {
    "percentile": (16, "85.2% at 8 configurations, 76.6% at 4"),
    "cr2": (2, "the cr2 interval covered >= 93% from 2 configurations up"),
    "wild": (4, "87.6% at 3 configurations"),
}


def study_warnings(
    n_configurations: int, nll_records: bool = True, interval: str = "percentile", task_configurations: dict[str, int] | None = None
) -> list[str]:
    """Caveats a reader must see next to the numbers. ``task_configurations``: configurations
    per task; a task with one (its by-task intervals are not estimable) is named when the
    study has more."""
    out = []
    lone = sorted(t for t, k in (task_configurations or {}).items() if k < 2)
    if lone and n_configurations >= 2:
        names = ", ".join(repr(t) for t in lone)
        out.append(
            f"task(s) {names} with only 1 configuration: one configuration shows no spread between "
            "configurations, so its by-task configuration intervals are not estimable (none is "
            "reported); the pooled intervals carry it with the other tasks, and its test-question "
            "intervals (tables/intervals.md, report.html) hold its trajectories fixed"
        )
    if not nll_records:
        out.append(
            "no validation NLL records (e.g. generations imported with `ckptsel ingest`): the "
            "matched-NLL rule and every H (gain over matched NLL) are not reported"
        )
    threshold, measured = FEW_CONFIGURATIONS[interval]
    if n_configurations < threshold:
        if n_configurations < 2:
            out.append(
                f"only {n_configurations} configuration(s): one configuration shows no spread between "
                "configurations, so the configuration and joint intervals are not estimable (none is "
                "reported); read the test-question intervals (tables/intervals.md, report.html), which "
                "hold this configuration's trajectories fixed, and add configurations before drawing "
                "conclusions about new ones"
            )
            return out
        if interval == "wild" and n_configurations < WILD_MIN_CONFIGURATIONS:
            detail = (
                f"the wild bootstrap-t is degenerate below {WILD_MIN_CONFIGURATIONS} configurations, "
                "so its configuration intervals are not estimable (use --interval cr2); it"
            )
            detail += f" covered under 90% of its estimand below {threshold} configurations"
        else:
            distinct = math.comb(2 * n_configurations - 1, n_configurations)  # multisets of size K
            detail = (
                f"the {interval} configuration interval"
                + (f" (just {distinct} distinct bootstrap resamples)" if interval == "percentile" else "")
                + f" covered under 90% of its estimand below {threshold} configurations in simulation"
            )
        out.append(
            f"only {n_configurations} configuration(s): {detail} ({measured}; BENCHMARKS.md), so it is "
            "not reliable here; read the test-question intervals (tables/intervals.md, report.html) "
            "and add configurations before drawing conclusions"
        )
    return out


@dataclass
class StatSettings:
    """Bootstrap draws, seed, level and the interval method (``intervals.METHODS``).

    ``interval="percentile"`` is the paper's method and reproduces its numbers exactly.
    """

    draws: int = defaults.DRAWS
    seed: int = defaults.SEED
    level: float = defaults.CONFIDENCE
    interval: str = defaults.INTERVAL

    def __post_init__(self):
        check_int(self.draws, "--draws", low=defaults.MIN_DRAWS, high=defaults.MAX_DRAWS)
        check_seed(self.seed)
        check_level(self.level)
        check_choice(self.interval, "--interval", iv.METHODS)


def name_str(name: Name) -> str:
    return "|".join(p for p in name if p != "")


def est(mean: float, lo: float, hi: float) -> Estimate:
    """An estimate in percentage points, as stored (see :meth:`ckptsel.results.Estimate.rounded`)."""
    return Estimate.rounded(mean, lo, hi)


def value_range(name: Name) -> tuple[float, float]:
    """The range of a quantity's values, where its interval is clipped: a difference of two
    accuracies (G, H, D, the matched half's G) lies in [−100, +100] pp; the matched half's
    optimism B = G_in − G_out, a difference of two such, in [−200, +200]; a share of trajectories
    (``same_nll_choice``) in [0, 1]."""
    if name[0] == "same_nll_choice":
        return 0.0, 1.0
    if name[0] == "MH" and name[2] == "B":
        return -200.0, 200.0
    return ex.DIFFERENCE


class _Estimates:
    """Point estimates + intervals for one family of replicates, addressable by name.

    ``reps`` ``(draws, Q)`` gives percentile intervals; ``bounds`` = ``(lo, hi)`` gives them
    directly (the t-type methods); both are clipped to each quantity's range
    (:func:`value_range`). ``units`` ``(Q,)`` counts the family's sampling units that carry each
    quantity (``unit``: what they are, e.g. "configuration"). An interval is *not estimable* (an
    :class:`~ckptsel.results.Estimate` without bounds, with the reason) where the design gives
    no information about its variance: fewer than ``min_units`` units, an undefined interval, or
    no spread at all across the units (zero width around a nonzero mean; an estimate that is
    exactly 0 everywhere, e.g. the last rule's G, keeps the ``[0, 0]`` it always had, which is
    unresolved; :func:`ckptsel.stats.exact.interval_estimate`). ``need``: the method's reason for
    ``min_units``.

    The small-design rule (:mod:`ckptsel.stats.exact`): ``valid`` ``(Q,)`` says where the
    interval's coverage was measured valid at this many units (None: everywhere); elsewhere an
    interval that excludes 0 reads resolved only when the exact test rejects too: ``exact(cols)``
    gives the ``(len(cols),)`` p-values of those quantities (computed once, for them only),
    ``why_invalid`` says why the interval alone does not decide there.
    """

    def __init__(
        self,
        names: list[Name],
        means: np.ndarray,
        reps: np.ndarray | None,
        level: float,
        bounds: tuple[np.ndarray, np.ndarray] | None = None,
        *,
        units: np.ndarray | None = None,
        unit: str = "configuration",
        min_units: int = 2,
        need: str = "",
        valid: np.ndarray | None = None,
        exact: Callable[[np.ndarray], np.ndarray] | None = None,
        why_invalid: str = "",
        test: str = "the exact sign-flip test",
    ):
        self.index = {n: k for k, n in enumerate(names)}
        self.means = means
        self.lo, self.hi = bounds if bounds is not None else bs.percentile_interval(reps, level)
        self.units, self.level = units, level
        self.unit, self.min_units, self.need = unit, min_units, need
        self.valid, self.why_invalid, self.test = valid, why_invalid, test
        self.p = np.full(len(names), np.nan)
        if valid is not None and exact is not None:  # the exact test where the interval alone cannot decide
            with np.errstate(invalid="ignore"):
                excludes = (self.lo > 0) | (self.hi < 0)
            cols = np.flatnonzero(~np.asarray(valid, bool) & excludes & np.isfinite(means))
            if len(cols):
                self.p[cols] = exact(cols)

    @property
    def rules(self) -> list[str]:
        """The rules with a G, H or D here: the built-in ones in :data:`~ckptsel.choose.rules.RULES`'
        order, then a researcher's, in the order of the names."""
        named = dict.fromkeys(n[2] for n in self.index if n[0] in ("G", "H", "D"))
        return [*(r for r in RULES if r in named), *(r for r in named if r not in RULES)]

    def get(self, name: Name) -> Estimate | None:
        k = self.index.get(name)
        if k is None or not np.isfinite(self.means[k]):
            return None
        units = None if self.units is None else int(self.units[k])
        e = ex.interval_estimate(
            float(self.means[k]), float(self.lo[k]), float(self.hi[k]), units, self.unit, self.min_units, self.need, value_range(name)
        )
        valid = self.valid is None or bool(self.valid[k])
        why = self.why_invalid.format(units=ex.plural(units or 0, self.unit))
        return ex.verdict(e, self.level, valid, lambda: self.p[k], self.test, why)


def _gains(e: _Estimates, scheme: str, labels=BUDGET_LABELS, *, d: bool = True, matched_half: bool = False) -> Gains:
    """``budget`` (rules and budgets with an estimate), ``D`` and the matched half of a scheme."""
    budget: dict[str, dict[str, BudgetCell]] = {}
    rules = e.rules
    for rule in rules:
        per = {}
        for b in labels:
            cell = BudgetCell(e.get(("G", scheme, rule, b)), e.get(("H", scheme, rule, b)))
            if cell.G is not None or cell.H is not None:
                per[b] = cell
        if per:
            budget[rule] = per
    D = {r: v for r in rules if (v := e.get(("D", scheme, r, ""))) is not None} if d else None
    return Gains(budget, D, _matched_half(e) if matched_half else None)


def _matched_half(e: _Estimates) -> dict[str, MatchedHalf]:
    out = {}
    for rule in MH_RULES:
        cell = [e.get(("MH", rule, s, "")) for s in MH_STATS]
        if all(v is not None for v in cell):
            out[rule] = MatchedHalf(*cell)
    return out


def _sensitivities(e: _Estimates, labels=BUDGET_LABELS, ov_labels=OV_LABELS) -> Sensitivities:
    thinning = {str(k): _gains(e, f"thin{k}", labels) for k in THINNING}
    same = e.get(("same_nll_choice", "nll_complete", "nll", FULL))
    if same is None:
        nll_complete = NllControl(skipped=NO_NLL_COMPLETE)
    else:
        nll_complete = NllControl(same, _gains(e, "nll_complete", labels, d=False))
    return Sensitivities(_gains(e, "one_variant", ov_labels), {k: g for k, g in thinning.items() if g.budget}, nll_complete)


def _configuration_estimates(names, means, sums, sizes, settings: StatSettings, stream: int, C: np.ndarray | None = None) -> _Estimates:
    """The configuration family (estimand: mean over configurations, test items fixed).

    ``C``: the percentile method's configuration counts (drawn here when not given). Where the
    method's interval was not measured valid at this many configurations
    (:data:`ckptsel.stats.exact.VALID_FROM`), the sign-flip test of the configurations' gain
    totals ``sums`` must reject too (draws, beyond 16 configurations, from ``[seed,
    SIGN_FLIPS, 0, stream]``)."""
    k = sums.shape[0]
    units = (sizes > 0).sum(axis=0)
    rule = {
        "valid": ex.valid_at("configuration", settings.interval, units),
        "exact": lambda cols: ex.sign_flip_p(
            sums[:, cols], lambda: streams.generator(settings.seed, streams.SIGN_FLIPS, 0, stream), level=settings.level
        ),
        "why_invalid": f"the {settings.interval} configuration interval was not measured valid at {{units}} (BENCHMARKS.md)",
    }
    if settings.interval == "cr2":
        _, lo, hi = iv.cr2_interval(sums, sizes, settings.level)
        return _Estimates(names, means, None, settings.level, (lo, hi), units=units, **rule)
    if settings.interval == "wild":
        W = iv.webb_weights(k, settings.draws, settings.seed, stream)
        _, lo, hi = iv.wild_interval(W, sums, sizes, settings.level)
        return _Estimates(
            names,
            means,
            None,
            settings.level,
            (lo, hi),
            units=units,
            min_units=WILD_MIN_CONFIGURATIONS,
            need=f": the wild bootstrap-t needs {WILD_MIN_CONFIGURATIONS} or more",
            **rule,
        )
    if C is None:
        C = bs.configuration_counts(k, settings.draws, settings.seed, stream)
    reps = bs.cluster_replicates(C, sums, sizes)
    return _Estimates(names, means, reps, settings.level, units=units, **rule)


def _config_sums(values: np.ndarray, config_codes: np.ndarray, n_conf: int) -> tuple[np.ndarray, np.ndarray]:
    has = ~np.isnan(values)
    onehot = np.zeros((n_conf, len(config_codes)))
    onehot[config_codes, np.arange(len(config_codes))] = 1.0
    return onehot @ np.where(has, values, 0.0), onehot @ has.astype(np.float64)


def _clusters(scored: ScoredChoices, task: str) -> int:
    """Test-question clusters of ``task`` (items sharing a ``group``; = test items without groups)."""
    g = scored.groups.get(task)
    return scored.test_items[task] if g is None else len(np.unique(g))


def _question_totals(scored: ScoredChoices, task: str) -> np.ndarray:
    """``(G_t, Q_lin)`` utility totals of ``task``'s test-question clusters, summed over its
    trajectories and divided by its test items: the units of its sign-flip test, on the scale of
    the pooled mean (a trajectory's value is the mean of its utilities over the task's items)."""
    util = np.nan_to_num(scored.utilities[task]).sum(axis=0)  # (N_t, Q_lin)
    return Clusters.of(scored.groups.get(task), util.shape[0]).sums(util) / util.shape[0]


def _flips(settings: StatSettings, *key: int) -> Callable[[], np.random.Generator]:
    return lambda: streams.generator(settings.seed, streams.SIGN_FLIPS, *key)


QUESTION_INVALID = "the test-question bootstrap alone rejects more than 5% of null data sets at every size measured (BENCHMARKS.md)"
JOINT_INVALID = "the joint interval is not valid alone at {units} and these test-question clusters (BENCHMARKS.md)"


def summarize(
    scored: ScoredChoices,
    settings: StatSettings,
    population: Population | dict,
    *,
    permutations: int | None = None,
    partitions: int | None = None,
    choices_sha256: str | None = None,
) -> tuple[Summary, dict[str, pd.DataFrame]]:
    """The typed summary and the descriptive tables (per trajectory, per configuration).

    ``population`` (who is in the study, checked into a :class:`ckptsel.results.Population`),
    ``permutations`` (nested validation orders), ``partitions`` (matched-half partitions) and
    ``choices_sha256`` (the frozen choices' hash) are recorded in the summary when given.
    """
    population = Population.coerce(population)
    labels, ov_labels = labels_of(scored.budgets), labels_of(scored.one_variant_budgets)
    configs = sorted(set(scored.configurations))
    conf_code = np.array([configs.index(c) for c in scored.configurations])
    sums, sizes = _config_sums(scored.values, conf_code, len(configs))
    with np.errstate(invalid="ignore", divide="ignore"):
        means = sums.sum(axis=0) / sizes.sum(axis=0)
    task_conf = {
        task: np.array(sorted({configs.index(c) for c, t in zip(scored.configurations, scored.tasks, strict=True) if t == task}))
        for task in scored.utilities
    }
    tables = _tables(scored, configs, sums, sizes)

    percentile = settings.interval == "percentile"
    C = bs.configuration_counts(len(configs), settings.draws, settings.seed) if percentile else None
    conf_est = _configuration_estimates(scored.names, means, sums, sizes, settings, 0, C)
    main = [("D", "nested", r, "") for r in scored.rules] + [(k, "nested", r, FULL) for r in scored.rules for k in ("H", "G")]
    question, joint = _question_and_joint(scored, settings, C, sums, sizes, means, task_conf, main, labels)
    # non-default budgets are named (default summaries stay as they were): D = G(full) − G(D_from)
    default_budgets = tuple(scored.budgets) == defaults.BUDGETS
    summary = Summary(
        seed=settings.seed,
        draws=settings.draws,
        confidence=settings.level,
        interval=None if percentile else settings.interval,
        permutations=permutations,
        partitions=partitions,
        choices_sha256=choices_sha256,
        budgets=None if default_budgets else tuple(int(b) for b in scored.budgets),
        D_from=None if default_budgets else int(scored.d_from),
        population=population,
        gains=_gains(conf_est, "nested", labels, matched_half=True),
        sensitivities=_sensitivities(conf_est, labels, ov_labels),
        by_task=_by_task(scored, settings, sums, sizes, task_conf, labels, ov_labels),
        question_bootstrap=question,
        joint_bootstrap=joint,
        descriptive=_sign_counts(scored, sums, sizes, main),
        signal_noise=_signal_noise(scored),
        warnings=tuple(study_warnings(len(configs), population.has_nll, settings.interval, {t: len(c) for t, c in task_conf.items()})),
    )
    return summary, tables


def _signal_noise(scored: ScoredChoices) -> SignalNoise | None:
    """Each task's signal, noise and their ratio from the checkpoints' test accuracies
    (:mod:`ckptsel.stats.noise`); None when the scored choices carry no accuracy curves."""
    if not scored.test_accuracy:
        return None
    curves = [_checkpoints_only(scored, t) for t in scored.trajectories]
    tasks = signal_and_noise(curves, scored.configurations, scored.tasks, defaults.NOISE_CHECKPOINTS)
    return SignalNoise(defaults.NOISE_CHECKPOINTS, tasks)


def _checkpoints_only(scored: ScoredChoices, trajectory: str):
    """``(T_c,)`` the test accuracy of a trajectory's checkpoints (its averages, at negative steps, left out)."""
    acc, steps = scored.test_accuracy[trajectory], scored.steps.get(trajectory)
    return acc if steps is None else acc[steps >= 0]


def _by_task(scored: ScoredChoices, settings: StatSettings, sums, sizes, task_conf, labels, ov_labels) -> dict[str, TaskResult]:
    """Per task: its configurations' own intervals (stream ``1 + task index``)."""
    by_task = {}
    for t_i, task in enumerate(sorted(set(scored.tasks))):
        members = np.array([t == task for t in scored.tasks])
        cidx = task_conf[task]
        t_sums, t_sizes = sums[cidx], sizes[cidx]
        with np.errstate(invalid="ignore", divide="ignore"):
            t_means = t_sums.sum(axis=0) / t_sizes.sum(axis=0)
        e = _configuration_estimates(scored.names, t_means, t_sums, t_sizes, settings, 1 + t_i)
        clusters = _clusters(scored, task)
        population = TaskPopulation(
            int(members.sum()),
            len(cidx),
            scored.test_items[task],
            # items share groups (resampled together): the clusters are named
            clusters if clusters < scored.test_items[task] else None,
        )
        by_task[task] = TaskResult(population, _gains(e, "nested", labels, matched_half=True), _sensitivities(e, labels, ov_labels))
    return by_task


def _question_and_joint(
    scored: ScoredChoices, settings: StatSettings, C, sums, sizes, means, task_conf, main: list[Name], labels
) -> tuple[QuestionBootstrap, Gains | None]:
    """Test-question bootstrap (nested-scheme G/H/D, overall and per task) and the joint
    intervals of the main table (pigeonhole bootstrap, or the two-way t for the t methods)."""
    lin_idx = np.flatnonzero(scored.linear)
    lin_names = scored.linear_names
    joint_cols = [lin_names.index(n) for n in main if n in lin_names]
    pooled, per_task, joint = bs.question_replicates(
        scored.utilities, task_conf, sizes[:, lin_idx], C, settings.draws, settings.seed, joint_cols, groups=scored.groups
    )
    lin_sizes = sizes[:, lin_idx]
    clusters = {
        t: np.where(lin_sizes[task_conf[t]].sum(axis=0) > 0, _clusters(scored, t), np.iinfo(np.int64).max) for t in per_task
    }  # per task and quantity: its test-question clusters
    fewest = np.min(np.stack(list(clusters.values())), axis=0) if clusters else np.zeros(len(lin_idx), np.int64)
    unit = "test-question cluster"
    q_totals = {t: _question_totals(scored, t) for t in per_task}
    tasks = list(per_task)  # (their order in the summary)

    def pooled_p(cols: np.ndarray) -> np.ndarray:  # every task's clusters flipped: one test
        totals = np.concatenate([q_totals[t][:, cols] for t in tasks]) if tasks else np.zeros((0, len(cols)))
        return ex.sign_flip_p(totals, _flips(settings, 1, 0), level=settings.level)

    q_est = _Estimates(
        lin_names,
        means[lin_idx],
        pooled,
        settings.level,
        units=fewest,
        unit=unit,
        valid=ex.valid_at("question", "percentile", fewest),
        exact=pooled_p,
        why_invalid=QUESTION_INVALID,
    )
    j_names = [lin_names[k] for k in joint_cols]
    j_units = (lin_sizes[:, joint_cols] > 0).sum(axis=0)
    j_fewest = fewest[joint_cols]
    # both sources resampled: valid at this many configurations and test-question clusters, else
    # the exact test of each source the interval was not measured valid at must reject too
    j_conf_valid = ex.valid_at("joint", "percentile" if settings.interval == "percentile" else "twoway", j_units)
    j_q_valid = ex.valid_at("question", "percentile", j_fewest)

    def joint_p(cols: np.ndarray) -> np.ndarray:
        lin_cols = np.asarray(joint_cols, dtype=np.int64)[cols]
        p_conf = ex.sign_flip_p(sums[:, lin_idx[lin_cols]], _flips(settings, 2, 0), level=settings.level)
        p_q = pooled_p(lin_cols)
        return np.maximum(np.where(j_conf_valid[cols], 0.0, p_conf), np.where(j_q_valid[cols], 0.0, p_q))

    joint_rule = {"valid": j_conf_valid & j_q_valid, "exact": joint_p, "why_invalid": JOINT_INVALID}
    j_est = None
    if joint is not None:
        j_means = means[lin_idx][joint_cols]
        j_est = _Estimates(j_names, j_means, joint, settings.level, units=j_units, **joint_rule)
    if settings.interval != "percentile" and joint_cols:  # crossed-design two-way variance instead of the pigeonhole
        j_means = means[lin_idx][joint_cols]
        bounds = iv.twoway_interval(scored.utilities, task_conf, lin_sizes, joint_cols, j_means, settings.level)
        j_est = _Estimates(j_names, j_means, None, settings.level, bounds, units=j_units, **joint_rule)
    by_task = {}
    for t_i, task in enumerate(tasks):
        reps = per_task[task]
        cidx = task_conf[task]
        with np.errstate(invalid="ignore", divide="ignore"):
            t_means = sums[cidx][:, lin_idx].sum(axis=0) / lin_sizes[cidx].sum(axis=0)
        totals = q_totals[task]
        t_est = _Estimates(
            lin_names,
            t_means,
            reps,
            settings.level,
            units=clusters[task],
            unit=unit,
            valid=ex.valid_at("question", "percentile", clusters[task]),
            exact=lambda cols, totals=totals, key=t_i + 1: ex.sign_flip_p(totals[:, cols], _flips(settings, 1, key), level=settings.level),
            why_invalid=QUESTION_INVALID,
        )
        by_task[task] = _gains(t_est, "nested", labels)
    question = QuestionBootstrap(_gains(q_est, "nested", labels), by_task)
    return question, None if j_est is None else _gains(j_est, "nested", labels=(FULL,))


def _sign_counts(scored: ScoredChoices, sums, sizes, names: list[Name]) -> dict[str, SignCounts]:
    out = {}
    with np.errstate(invalid="ignore", divide="ignore"):
        conf_means = sums / sizes
    for name in names:
        if name not in scored.names:
            continue
        col = conf_means[:, scored.names.index(name)]
        col = col[np.isfinite(col)]
        out[name_str(name)] = SignCounts(int((col > 0).sum()), int((col < 0).sum()), int((col == 0).sum()))
    return out


def _tables(scored: ScoredChoices, configs: list[str], sums, sizes) -> dict[str, pd.DataFrame]:
    cols = [name_str(n) for n in scored.names]
    per_traj = pd.DataFrame(scored.values, columns=cols)
    per_traj.insert(0, "task", scored.tasks)
    per_traj.insert(0, "configuration", scored.configurations)
    per_traj.insert(0, "trajectory", scored.trajectories)
    with np.errstate(invalid="ignore", divide="ignore"):
        conf_means = sums / sizes
    task_of = dict(zip(scored.configurations, scored.tasks, strict=True))
    per_conf = pd.DataFrame(conf_means, columns=cols)
    per_conf.insert(0, "trajectories", sizes.max(axis=1).astype(int))
    per_conf.insert(0, "task", [task_of[c] for c in configs])
    per_conf.insert(0, "configuration", configs)
    loo = pd.DataFrame(bs.leave_one_out_means(sums, sizes), columns=cols)
    loo.insert(0, "left_out_configuration", configs)
    return {"per_trajectory": per_traj, "per_configuration": per_conf, "leave_one_out": loo}
