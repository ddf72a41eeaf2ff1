"""Practitioner mode: which checkpoint of ONE trajectory to keep, with an honest gain estimate.

For each rule the full-pool choice (or its tie set) and the budget curve (which checkpoint
each validation budget picks) come from the same engine as the study analysis
(:func:`ckptsel.choose.choose_trajectory`). The gain of the choice over the final checkpoint
is never scored on the items used to make it:

* **split validation** — the eligible validation pool is split into random halves (``P``
  partitions, both directions; items that share a ``group`` always go to the same half, so
  no question's variants sit on both sides); the rule chooses on one half and the choice is scored by
  accuracy on the other half. Its interval is a question bootstrap that redoes the whole
  split-and-choose procedure on every resample of validation questions (weights per
  question, so a repeated question never sits on both sides), so the variability of the
  choice itself is in the interval;
* **test** (when the trajectory has test records) — the frozen full-pool choice scored on
  the test pool, with a test-question bootstrap (choice held fixed, SPEC §8).

Two more answers concern the checkpoint with the highest validation accuracy (the accuracy
rule's full-pool choice), from :mod:`ckptsel.stats.winners`:

* **plausibly best** — the checkpoints the validation data cannot tell apart from the best: a
  model confidence set (Hansen, Lunde & Nason 2011; range statistic on paired accuracy
  differences, a cluster bootstrap of a fixed stream, so the set depends on the data alone, not
  on ``--seed``), which holds every truly best checkpoint with probability ≥ ``level``
  (family-wise over its elimination tests); a checkpoint that the exact paired test (the
  clustered McNemar test) cannot tell from the most accurate one at ``1 − level`` stays in the
  set (``kept_by_exact_test``);
* **chosen estimate** — the chosen checkpoint's accuracy on new items, corrected for having
  been chosen as the best of T (the winner's curse): the hybrid estimate and interval of
  Andrews, Kitagawa & McCloskey (2024) with the winner's variance taken at the accuracy tested
  (nothing random in it; never above the naive value), beside the naive ``max ± z·se`` it
  corrects; for a
  checkpoint whose accuracy has no variance (right on every item) the exact Clopper–Pearson
  interval instead (``exact``), every bound in [0, 100].

``benchmarks/bench_select.py`` measures both on truth-known trajectories.

The recommendation is "keep checkpoint X" only when the split-validation interval lies
wholly above 0 and the exact test of the chosen against the final checkpoint on the validation
items rejects (the McNemar test ``compare`` makes; the one small-design rule,
:mod:`ckptsel.stats.exact`); otherwise "keep the final checkpoint", with the reason. Everything is
vectorized: masks and matrix products over partitions and draws. The rules and their signals
come from :mod:`ckptsel.choose.rules` (via :func:`ckptsel.choose.signals`), weighted sums from
:func:`ckptsel.choose.core.weighted_sums` and estimates (:class:`ckptsel.results.Estimate`, as
stored) from :func:`ckptsel.stats.est`.

The answer is typed: a :class:`Selection` (per rule a :class:`RuleSelection` with its
:class:`SplitValidationGain` and :class:`TestGain`, and the :class:`Recommendation`), whose
``to_dict()`` is what ``ckptsel select --json`` prints and the Trainer callback writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from ckptsel import defaults
from ckptsel._util import rng as streams
from ckptsel._util.checks import check_int, check_level, check_seed
from ckptsel._util.threads import single_threaded
from ckptsel.choose import core
from ckptsel.choose.choices import averages_of, choose_trajectory, full_pool_choice, pools_of, signals
from ckptsel.choose.rules import AVERAGE_RULE_RE, RULES, SIGNAL_RULES, RuleSpec, UserRule, rule_specs
from ckptsel.choose.settings import FULL, ChoiceSettings, labels_of
from ckptsel.defaults import BUDGETS
from ckptsel.errors import CkptselError
from ckptsel.records.load import TestData, ValidationData, ValidationExtras, find_trajectory, load_test, load_validation, validation_only
from ckptsel.records.schema import MATCHED_WINDOW, candidate_name, step_text
from ckptsel.results.estimate import Estimate, fmt
from ckptsel.results.summary import KeepRow, KeepTable
from ckptsel.stats.bootstrap import percentile_interval
from ckptsel.stats.exact import interval_estimate, judged, nonzero_units, sign_flip_p
from ckptsel.stats.paired import clustered_mcnemar, mcnemar_exact
from ckptsel.stats.resample import Clusters, question_weights, resample_counts
from ckptsel.stats.winners import JITTER as WINNER_JITTER
from ckptsel.stats.winners import (
    accuracy_moments,
    bootstrap_accuracies,
    model_confidence_set,
    naive_winner,
    winner_interval,
    without_variance,
)
from ckptsel.workflows.advise.comparison import fallback_matrix, fallback_shares, paired_estimate

CHUNK_CELLS = 4_000_000  # (draw, partition) rows × items per mask chunk: bounds memory (~32 MB)


@dataclass(frozen=True)
class SelectSettings:
    """How hard to look: partitions for the point estimate, draws × partitions for the interval."""

    partitions: int = defaults.PERMUTATIONS
    draws: int = defaults.SELECT_DRAWS
    bootstrap_partitions: int = defaults.SELECT_BOOTSTRAP_PARTITIONS
    permutations: int = defaults.PERMUTATIONS
    seed: int = defaults.SEED
    level: float = defaults.CONFIDENCE

    def __post_init__(self) -> None:
        check_int(self.partitions, "--partitions", low=1, high=defaults.MAX_PERMUTATIONS)
        check_int(self.bootstrap_partitions, "--bootstrap-partitions", low=1, high=self.partitions)
        check_int(self.draws, "--draws", low=defaults.MIN_DRAWS, high=defaults.MAX_DRAWS)
        check_int(self.permutations, "--permutations", low=1, high=defaults.MAX_PERMUTATIONS)
        check_seed(self.seed)
        check_level(self.level)


# --------------------------------------------------------------------------- the answer, typed
@dataclass(frozen=True)
class SplitValidationGain:
    """The split-validation gain over the final checkpoint (pp): chosen on one half, scored on
    the other, ``partitions`` times both ways; its interval redoes the split on each of the
    question-bootstrap draws (``clusters`` resampled validation clusters)."""

    estimate: Estimate
    partitions: int
    half_sizes: tuple[int, int]
    clusters: int

    def to_dict(self) -> dict:
        return {**self.estimate.to_dict(), "partitions": self.partitions, "half_sizes": list(self.half_sizes), "clusters": self.clusters}


@dataclass(frozen=True)
class TestGain:
    """The frozen full-pool choice scored on the test pool (pp), test-question interval."""

    __test__ = False  # not a pytest test class

    estimate: Estimate
    items: int
    clusters: int
    chosen_accuracy: float
    final_accuracy: float

    def to_dict(self) -> dict:
        return {
            **self.estimate.to_dict(),
            "items": self.items,
            "clusters": self.clusters,
            "chosen_accuracy": self.chosen_accuracy,
            "final_accuracy": self.final_accuracy,
        }


@dataclass(frozen=True)
class BudgetPick:
    """What one validation budget picks: the most likely step, its probability, every pick."""

    budget: str
    most_likely_step: int
    probability: float
    picks: dict[str, float]

    def to_dict(self) -> dict:
        return asdict(self)  # its fields, in order


@dataclass(frozen=True)
class RuleSelection:
    """One rule's answer: its full-pool choice (``steps``: the tie set; ``probabilities`` by
    step), its budget curve, its split-validation gain and (with test records) its test gain."""

    steps: tuple[int, ...]
    probabilities: dict[str, float]
    budget_curve: tuple[BudgetPick, ...]
    split_validation: SplitValidationGain
    test: TestGain | None = None

    @property
    def choice(self) -> dict:
        """``{"steps", "probabilities"}`` as ``select --json`` prints it."""
        return {"steps": list(self.steps), "probabilities": dict(self.probabilities)}

    def to_dict(self) -> dict:
        return {
            "choice": self.choice,
            "budget_curve": [c.to_dict() for c in self.budget_curve],
            "split_validation": self.split_validation.to_dict(),
            "test": None if self.test is None else self.test.to_dict(),
        }


@dataclass(frozen=True)
class Recommendation:
    """Which checkpoint to keep, and why."""

    rule: str
    keep_step: int
    keep_final: bool
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)  # its fields, in order


@dataclass(frozen=True)
class PlausiblyBest:
    """The checkpoints the validation data cannot tell apart from the most accurate one; its
    bootstrap (``draws`` resamples) has a fixed stream, so it depends on the data alone."""

    steps: tuple[int, ...]
    level: float
    mcs_p_values: dict[str, float]
    eliminations: tuple[dict, ...]  # per test: set size, statistic, p-value, who left
    draws: int
    clusters: int
    kept_by_exact_test: tuple[int, ...] = ()  # left out by the MCS, but an exact test cannot

    method = "model confidence set (Hansen, Lunde & Nason 2011): range statistic on paired accuracy differences, cluster bootstrap"

    def to_dict(self) -> dict:
        return {
            "steps": list(self.steps),
            "method": self.method,
            "error_rate": f"P(a truly best checkpoint is left out) <= {1 - self.level:.3g} "
            "(family-wise over the elimination tests; asymptotic)",
            "level": self.level,
            "mcs_p_values": dict(self.mcs_p_values),
            "eliminations": [dict(e) for e in self.eliminations],
            "draws": self.draws,
            "clusters": self.clusters,
            **({"kept_by_exact_test": list(self.kept_by_exact_test)} if self.kept_by_exact_test else {}),
        }


@dataclass(frozen=True)
class ChosenEstimate:
    """The accuracy (%) on new items of the checkpoint with the highest validation accuracy,
    corrected for having been chosen, with the naive estimate it corrects; ``mean`` is never
    above ``naive_mean``. Nothing in it is random (``jitter_draws``: the nodes over the winner's
    rounding cell), so it depends on the validation data alone."""

    steps: tuple[int, ...]  # the chosen step(s): ties at the top
    mean: float
    lo: float
    hi: float
    naive_mean: float
    naive_lo: float
    naive_hi: float
    level: float
    jitter_draws: int
    exact: bool = False  # the winner's accuracy has no variance: the exact interval

    @property
    def method(self) -> str:
        if self.exact:
            return (
                "exact: Clopper-Pearson over the validation clusters, simultaneous over the "
                "checkpoints (the winner's accuracy has no variance), median-unbiased estimate"
            )
        return (
            "hybrid conditional estimate and interval for the winner (Andrews, Kitagawa & "
            "McCloskey 2024), cluster-robust covariance, the winner's variance at the tested "
            "accuracy, Sidak projection value, averaged over the winner's rounding cell"
        )

    def to_dict(self) -> dict:
        return {
            "steps": list(self.steps),
            "mean": self.mean,
            "lo": self.lo,
            "hi": self.hi,
            "level": self.level,
            "method": self.method,
            "optimism_pp": round(self.naive_mean - self.mean, 6),
            "naive": {"mean": self.naive_mean, "lo": self.naive_lo, "hi": self.naive_hi},
            "jitter_draws": self.jitter_draws,
        }


@dataclass(frozen=True)
class AnswerSettings:
    """When a checkpoint reads as degenerate (one answer to most items:
    :data:`ckptsel.defaults.DEGENERATE_SHARE`) and whether one may still be recommended."""

    share: float = defaults.DEGENERATE_SHARE
    min_items: int = defaults.DEGENERATE_MIN_ITEMS
    precision: float = defaults.DEGENERATE_PRECISION
    allow: bool = False  # --allow-degenerate: a flagged checkpoint may be kept (and is said so)
    strict: bool = False  # --strict-answers: an answer only a fallback found counts as wrong

    def __post_init__(self) -> None:
        if isinstance(self.share, bool) or not isinstance(self.share, (int, float)) or not 0 < self.share <= 1:
            raise CkptselError(f"--degenerate-share must be a number in (0, 1], got {self.share!r}")


@dataclass(frozen=True)
class AnswerCheck:
    """Per checkpoint of a trajectory's eligible validation pool (``items`` of them): the share
    of items given its most common answer and the share of those that answer is right on;
    ``flagged``: the degenerate checkpoints (:func:`ckptsel.choose.core.degenerate_checkpoints`)."""

    items: int
    shares: dict[str, float]
    precisions: dict[str, float]
    flagged: tuple[int, ...]
    settings: AnswerSettings

    @classmethod
    def of(cls, v: ValidationData, settings: AnswerSettings | None = None) -> AnswerCheck:
        settings = settings or AnswerSettings()
        flagged, shares, precisions = core.degenerate_checkpoints(
            v.answers, v.correct, settings.share, settings.min_items, settings.precision
        )
        steps = [int(s) for s in v.steps]
        return cls(
            len(v.item_ids),
            {str(st): round(float(x), 6) for st, x in zip(steps, shares, strict=True)},
            {str(st): round(float(x), 6) for st, x in zip(steps, precisions, strict=True)},
            tuple(st for st, f in zip(steps, flagged, strict=True) if f),
            settings,
        )

    def describe(self, step: int) -> str:
        """``step`` in words, e.g. ``step 40 gives one answer to 100% of its 128 eligible
        validation items and is right on 5% of them``."""
        return (
            f"{'step ' if step >= 0 else ''}{step_text(step)} gives one answer to {100 * self.shares[str(step)]:.0f}% of its {self.items} "
            f"eligible validation items and is right on {100 * self.precisions[str(step)]:.0f}% of those"
        )

    @property
    def rule_words(self) -> str:
        """The flag's rule in words."""
        s = self.settings
        return (
            f"one answer to {100 * s.share:.0f}% or more of at least {s.min_items} items (and to 2/K "
            "or more, K the distinct answers the checkpoints give), wrong on "
            f"{100 * (1 - s.precision):.0f}% or more of them"
        )

    def to_dict(self) -> dict:
        s = self.settings
        return {
            "items": self.items,
            "most_common_share": dict(self.shares),
            "most_common_right": dict(self.precisions),
            "flagged": list(self.flagged),
            "threshold": {"share": s.share, "min_items": s.min_items, "right_below": s.precision},
            "allow_degenerate": s.allow,
        }


@dataclass(frozen=True)
class FallbackCheck:
    """Per checkpoint of a trajectory's eligible validation pool: the share of its correct
    answers that only the answer rule's fallback found; ``strict``: they were counted wrong
    (``--strict-answers``); ``strict_gain``: with them counted wrong, the split-validation gain
    of the rule's choice (made when the recommendation keeps an earlier checkpoint, so that a
    decision resting on fallback answers says so)."""

    shares: dict[str, float]
    strict: bool
    strict_gain: Estimate | None = None
    strict_steps: tuple[int, ...] = ()

    def to_dict(self) -> dict:
        return {
            "fallback_right": dict(self.shares),
            "strict_answers": self.strict,
            "strict_gain": None if self.strict_gain is None else self.strict_gain.to_dict(),
            "strict_choice": list(self.strict_steps),
        }


@dataclass(frozen=True)
class Selection:
    """Everything ``ckptsel select`` answers for one trajectory; :meth:`to_dict` is its JSON."""

    trajectory: str
    configuration: str
    task: str
    steps: tuple[int, ...]
    validation_items: int
    validation_clusters: int
    validation_exclusions: dict[str, int]
    test_items: int | None
    settings: SelectSettings
    rules: dict[str, RuleSelection]
    recommendation: Recommendation
    plausibly_best: PlausiblyBest | None = None
    chosen_estimate: ChosenEstimate | None = None
    answer_check: AnswerCheck | None = None  # degenerate checkpoints (one answer to most items)
    notes: tuple[str, ...] = ()  # what was left out and why (a rule skipped for this trajectory)
    fallback: FallbackCheck | None = None  # answers only a fallback found (None: no texts)

    @property
    def final_step(self) -> int:
        return int(self.steps[-1])

    def to_dict(self) -> dict:
        return {
            "trajectory": self.trajectory,
            "configuration": self.configuration,
            "task": self.task,
            "steps": list(self.steps),
            "final_step": self.final_step,
            "validation_items": self.validation_items,
            "validation_clusters": self.validation_clusters,
            "validation_exclusions": dict(self.validation_exclusions),
            "test_items": self.test_items,
            "settings": asdict(self.settings),
            "rules": {r: sel.to_dict() for r, sel in self.rules.items()},
            "recommendation": self.recommendation.to_dict(),
            "plausibly_best": None if self.plausibly_best is None else self.plausibly_best.to_dict(),
            "chosen_estimate": None if self.chosen_estimate is None else self.chosen_estimate.to_dict(),
            "answer_check": None if self.answer_check is None else self.answer_check.to_dict(),
            "fallback": None if self.fallback is None else self.fallback.to_dict(),
            "notes": list(self.notes),
        }


# --------------------------------------------------------------------------- estimates
def gain_estimate(mean: float, replicates: np.ndarray, level: float, clusters: int, unit: str, p: float, discordant: int) -> Estimate:
    """The point estimate with the percentile interval of its ``(W,)`` bootstrap replicates of
    ``clusters`` resampled ``unit`` clusters; not estimable from one cluster, or when the
    replicates show no spread around a nonzero mean (no variance information); unresolved when
    the exact test of the chosen against the final checkpoint (``p``, :func:`choice_p`; they
    differ on ``discordant`` clusters) does not reject at ``level`` (the one small-design rule,
    :func:`ckptsel.stats.judged`)."""
    lo, hi = percentile_interval(replicates[:, None], level)
    e = interval_estimate(float(mean), float(lo[0]), float(hi[0]), clusters, f"{unit} cluster")
    return judged(e, level, p, "the exact McNemar test", discordant, f"discordant {unit} cluster")


def discordant_clusters(choice: np.ndarray, correct: np.ndarray, groups: np.ndarray | None) -> int:
    """Clusters (items sharing a group) on which the ``(T,)`` choice (probabilities over
    checkpoints) and the final checkpoint differ in items right, from ``correct`` (T, n)."""
    z = correct.astype(np.float64)
    d = np.asarray(choice, dtype=np.float64) @ (z - z[-1])  # (n,)
    return int(nonzero_units(Clusters.of(groups, len(d)).sums(d[:, None]))[0])


def choice_p(choice: np.ndarray, correct: np.ndarray, groups: np.ndarray | None, seed: int, level: float) -> float:
    """The exact two-sided p-value of the ``(T,)`` choice (probabilities over checkpoints)
    against the final checkpoint on the items of ``correct`` (T, n), clustered by ``groups``:
    for one chosen checkpoint the McNemar test ``compare`` makes (exact binomial, or its clustered
    sign-flip form when items share groups); for a tie set the sign-flip test of the clusters'
    totals of the averaged difference (draws from ``[seed, SIGN_FLIPS, 3]`` beyond 16 clusters)."""
    choice = np.asarray(choice, dtype=np.float64)
    n = correct.shape[1]
    one = np.flatnonzero(choice > 0)
    if len(one) == 1:
        a, b = correct[one[0]].astype(bool), correct[-1].astype(bool)
        if groups is None or Clusters.of(groups, n).singletons:
            return mcnemar_exact(int((a & ~b).sum()), int((~a & b).sum()))
        return clustered_mcnemar(a, b, groups)
    z = correct.astype(np.float64)
    totals = Clusters.of(groups, n).sums((choice @ (z - z[-1]))[:, None])
    return float(sign_flip_p(totals, lambda: streams.generator(seed, streams.SIGN_FLIPS, 3), level=level)[0])


def split_validation_gains(signal: np.ndarray, correct: np.ndarray, maximize: bool, in_s: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``(W,)`` split-validation gains (pp), one per weight row, averaged over partitions and both directions.

    ``in_s`` (P, n) marks the first half of each partition, ``weights`` (W, n) the question
    multiplicities (ones for the point estimate). In direction 1 the rule chooses on S by
    ``signal`` and the choice is scored by accuracy on S̄; direction 2 swaps the halves.
    Ties among checkpoints are averaged uniformly. One trajectory of
    :func:`pooled_split_gains`.
    """
    return pooled_split_gains([signal], [correct], maximize, in_s, weights)[0]


def pooled_split_gains(
    signals: Sequence[np.ndarray], corrects: Sequence[np.ndarray], maximize: bool, in_s: np.ndarray, weights: np.ndarray
) -> list[np.ndarray]:
    """:func:`split_validation_gains` of K trajectories that share one validation pool (the same
    items, so the same partitions ``in_s`` (P, n) and weights ``(W, n)``): ``(W,)`` gains of
    each, from its ``(T_k, n)`` signal and correctness.

    The sums over the halves are made once per chunk of (draw, partition) masks for all K:
    integer sums (integer signals, correctness, integer weights) in one float32 product, exact
    because every partial sum is an integer below 2**24 (so the same numbers as any float64
    order); float signals (NLL) each in its own float64 product with identical checkpoint rows
    summed once (:func:`ckptsel.choose.core.weighted_sums`). Integer sums are made over
    :func:`merged_items` (a group's variants summed once: the same exact integers).
    """
    W, P, n = weights.shape[0], in_s.shape[0], in_s.shape[1]
    rows_per_chunk = max(1, CHUNK_CELLS // (P * max(1, n)))  # of the items: the same chunks merged or not
    signals, corrects, in_s, weights, counts = merged_items(list(signals), list(corrects), in_s, weights)
    n = in_s.shape[1]
    halves = _HalfSums(list(signals), list(corrects), weights, counts)
    gains = [np.empty(W * P) for _ in halves.sig]
    for start in range(0, W, rows_per_chunk):
        stop = min(W, start + rows_per_chunk)
        masks = (weights[start:stop, None, :] * in_s[None, :, :]).reshape(-1, n)  # (w*P, n)
        rep = np.repeat(np.arange(start, stop), P)
        size_in = masks.sum(axis=1) if counts is None else masks @ counts
        size_out = halves.total_w[rep] - size_in
        sizes = [np.where(size > 0, size, np.nan) for size in (size_out, size_in)]
        sums = halves.of(masks)
        for k, (sig_in, corr_in) in enumerate(sums):
            sig_out = _outside(halves.total_sig[k][:, start:stop], sig_in)
            corr_out = sig_out if corr_in is sig_in else _outside(halves.total_corr[k][:, start:stop], corr_in)
            with np.errstate(invalid="ignore", divide="ignore"):
                g = []
                for choose_on, score_on, size in ((sig_in, corr_out, sizes[0]), (sig_out, corr_in, sizes[1])):
                    g.append(_choice_gains(choose_on, score_on, maximize) / size)
            gains[k][start * P : stop * P] = 100.0 * np.nanmean(np.stack(g), axis=0)
    return [g.reshape(W, P).mean(axis=1) for g in gains]


def _outside(total: np.ndarray, inside: np.ndarray) -> np.ndarray:
    """``(T, w·P)`` sums over the other halves: ``total`` (T, w) per draw less ``inside``
    (T, w·P), each draw's P partitions in a row (``total[:, rep] − inside``, without the copy)."""
    T, w = total.shape
    return (total[:, :, None] - inside.reshape(T, w, -1)).reshape(T, -1)


def _choice_gains(choose_on: np.ndarray, score_on: np.ndarray, maximize: bool) -> np.ndarray:
    """``(R,)``: per column of ``choose_on`` (T, R), the choice's score on ``score_on`` over the
    final checkpoint's, ``Σ_t p_t (score_on[t] − score_on[-1])`` with ``p`` the column's
    :func:`ckptsel.choose.core.tie_probabilities` — differences to the final checkpoint first:
    an exact 0 when the choice equals it. Where no score has its sign bit set (correctness
    sums), a column with one best checkpoint is that checkpoint's difference alone, the same
    number (every other term is +0); the tied columns are summed as NumPy sums the whole
    ``(T, R)`` array, R ≥ 2 (row after row: pairwise summation only runs along a contiguous
    axis, as a single column's would be)."""
    best = choose_on.max(axis=0) if maximize else choose_on.min(axis=0)
    tied = choose_on == best
    count = tied.sum(axis=0)
    if choose_on.shape[1] < 2 or np.signbit(score_on).any():
        return ((tied / count) * (score_on - score_on[-1])).sum(axis=0)
    out = ((tied * score_on).sum(axis=0) - score_on[-1]).astype(np.float64)
    many = np.flatnonzero(count != 1)
    if len(many):
        terms = (tied[:, many] / count[many]) * (score_on[:, many] - score_on[-1, many])
        total = terms[0].copy()
        for row in terms[1:]:
            total += row
        out[many] = total
    return out


def merged_items(
    signals: list[np.ndarray], corrects: list[np.ndarray], in_s: np.ndarray, weights: np.ndarray
) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray, np.ndarray, np.ndarray | None]:
    """The items of a split whose half and weight agree in every row of ``in_s`` and
    ``weights`` (a group's variants: both are drawn per group) as one column each, their
    signals and correctness summed: ``(signals, corrects, in_s, weights, counts)`` over the
    merged columns, ``counts`` (m,) the items in each. Every sum over a mask is then the same
    integer as over the items; so only when all of them are exact integers (integer signals and
    correctness, non-negative integer weights, every sum below 2**24): otherwise the arguments
    themselves and ``counts`` None."""
    unmerged = signals, corrects, in_s, weights, None
    arrays = [*signals, *corrects]
    if not arrays or any(a.dtype.kind not in "biu" for a in arrays):
        return unmerged
    # each column hashed (any hash: the columns of one hash are then checked equal), by fixed
    # integer multipliers below 2**20 (exact sums for integer columns: equal columns hash equal)
    mult = (core.splitmix64(np.arange(len(in_s) + len(weights), dtype=np.uint64)) >> np.uint64(44)).astype(np.float64)
    hashes = mult[: len(in_s)] @ in_s + mult[len(in_s) :] @ weights
    _, first, inverse, counts = np.unique(hashes, return_index=True, return_inverse=True, return_counts=True)
    if len(first) == in_s.shape[1]:
        return unmerged
    keys = [in_s[:, first], weights[:, first]]  # every column equal to its representative, integer, >= 0
    top = max(float(np.abs(a).max(initial=0)) for a in arrays)
    if not (
        (in_s[:, first[inverse]] == in_s).all()
        and (weights[:, first[inverse]] == weights).all()
        and all((np.rint(k) == k).all() and (k >= 0).all() for k in keys)
        and top * (keys[1] @ counts).max(initial=0) < 2**24
    ):
        return unmerged
    order = np.argsort(inverse, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])

    def merged(a: np.ndarray) -> np.ndarray:
        return np.add.reduceat(a[:, order].astype(np.int64), starts, axis=1)

    return [merged(a) for a in signals], [merged(a) for a in corrects], *keys, counts.astype(np.float64)


class _HalfSums:
    """Sums of K trajectories' signals and correctness ``(T_k, n)`` over weight rows ``(R, n)``:
    the count rows (integer signals, correctness) of all K in one float32 product when the
    weights are integers and every sum stays below 2**24 (exact), the rest in float64 as
    :func:`ckptsel.choose.core.weighted_sums` makes them. ``total_*``: over ``weights`` itself.
    ``items``: the items in each column (:func:`merged_items`; None: one each)."""

    def __init__(self, signals: list[np.ndarray], corrects: list[np.ndarray], weights: np.ndarray, items: np.ndarray | None = None) -> None:
        self.sig = [s if s.dtype.kind in "biu" else s.astype(np.float64) for s in signals]
        self.corr = [c.astype(np.float64) if c.dtype.kind == "f" else c for c in corrects]
        self.firsts = [None if s.dtype.kind in "biu" else core.first_identical_row(s) for s in self.sig]
        ints = [a for pair in zip(self.sig, self.corr, strict=True) for a in pair if a.dtype.kind in "biu"]
        top = max((float(np.abs(a).max(initial=0)) for a in ints), default=0.0)
        self.exact = bool((np.rint(weights) == weights).all() and (weights >= 0).all() and top * weights.sum(axis=1).max(initial=0) < 2**24)
        # the accuracy rule's signal is its correctness: summed once
        self.same = [
            self.exact and s.dtype.kind in "biu" and c.dtype.kind in "biu" and np.array_equal(s, c)
            for s, c in zip(self.sig, self.corr, strict=True)
        ]
        counts = [
            a
            for s, c, same in zip(self.sig, self.corr, self.same, strict=True)
            for a in ((s,) if same else (s, c))
            if a.dtype.kind in "biu"
        ]
        self.rows = np.concatenate([a.astype(np.float32) for a in counts]) if self.exact and counts else None
        self.total_w = weights.sum(axis=1) if items is None else weights @ items  # items: per column
        totals = self.of(weights)
        self.total_sig = [s for s, _ in totals]
        self.total_corr = [c for _, c in totals]

    def of(self, masks: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per trajectory, ``(T_k, R)`` sums of its signal and of its correctness over ``masks`` (R, n)."""
        flat = None if self.rows is None else self.rows @ masks.astype(np.float32).T  # exact integers
        at, out = 0, []
        for s, c, first, same in zip(self.sig, self.corr, self.firsts, self.same, strict=True):
            if flat is not None and s.dtype.kind in "biu":
                sig = flat[at : at + len(s)]
                at += len(s)
            else:
                sig = core.weighted_sums(s.astype(np.float64), masks.T, first)
            if same:
                out.append((sig, sig))
                continue
            if flat is not None and c.dtype.kind in "biu":
                corr = flat[at : at + len(c)]
                at += len(c)
            else:
                corr = c.astype(np.float64) @ masks.T
            out.append((sig, corr))
        return out


def partition_masks(item_ids: np.ndarray, partitions: int, seed: int, groups: np.ndarray | None = None) -> np.ndarray:
    """``(P, n)`` indicators of the first half of each deterministic random partition.

    Without shared groups the first half is ⌊n/2⌋ items in a random order of the items. When
    items share a ``group`` (variants of one question) whole groups go to one half: the groups
    are put in a random order (hashed by group name) and a group joins the first half when its
    midpoint in that order falls before n/2 items, so the halves hold about n/2 items each and
    never split a group (a split group would leak: its variants are scored on the other half).
    """
    n = len(item_ids)
    clusters = Clusters.of(groups, n)
    if clusters.count == n:  # every item its own group: the item order, as always
        orders = core.permutations(core.string_keys(list(item_ids)), seed, partitions, stream=streams.SELECT_HALVES)
        in_s = np.zeros((partitions, n))
        np.put_along_axis(in_s, orders[:, : n // 2], 1.0, axis=1)
        return in_s
    first = np.unique(clusters.codes, return_index=True)[1]  # each cluster's first item
    names = np.asarray(groups)[first]
    orders = core.permutations(core.string_keys(list(names)), seed, partitions, stream=streams.SELECT_HALVES)
    size = clusters.sizes[orders]  # (P, G) in each partition's cluster order
    middle = np.cumsum(size, axis=1) - size / 2.0
    in_first = np.zeros((partitions, clusters.count))
    np.put_along_axis(in_first, orders, (middle < n / 2.0).astype(np.float64), axis=1)
    return in_first[:, clusters.codes]


def test_gain(choice: np.ndarray, test: TestData, draws: int, seed: int, level: float) -> TestGain:
    """Frozen full-pool choice scored on the test pool; test-question bootstrap with the choice held
    fixed (items sharing a ``group`` resampled as one cluster). A single chosen checkpoint is
    judged exactly as ``compare`` judges it against the final one on the same items
    (:func:`ckptsel.workflows.advise.comparison.paired_estimate`: Newcombe's interval and the exact
    McNemar test for independent items), so the two commands agree."""
    z = test.correct.astype(np.float64)
    d = 100.0 * (choice @ (z - z[-1]))  # (N,) per-question utility d_i = 100 (Σ_t p_t z_ti − z_Ti)
    n = len(d)
    R, clusters = question_weights(test.groups, n, draws, streams.generator(seed, streams.SELECT_TEST_DRAWS))

    def replicates(values: np.ndarray) -> np.ndarray:
        return R @ values / (n if clusters == n else R.sum(axis=1))

    one = np.flatnonzero(np.asarray(choice) > 0)
    if len(one) == 1:  # one checkpoint against the final one: compare's paired difference
        groups = np.arange(n).astype(str) if test.groups is None else np.asarray(test.groups)
        gain = paired_estimate(test.correct[one[0]], test.correct[-1], groups, level, replicates)[0]
    else:
        gain = gain_estimate(
            d.mean(),
            replicates(d),
            level,
            clusters,
            "test-question",
            choice_p(choice, test.correct, test.groups, seed, level),
            discordant_clusters(choice, test.correct, test.groups),
        )
    return TestGain(
        gain,
        items=int(n),
        clusters=int(clusters),
        chosen_accuracy=round(float(100.0 * (choice @ z).mean()), 6),
        final_accuracy=round(float(100.0 * z[-1].mean()), 6),
    )


# --------------------------------------------------------------------------- the answer
def _probabilities(vec: np.ndarray, steps: np.ndarray) -> dict[str, float]:
    nz = np.flatnonzero(vec > 0)
    return {str(int(steps[i])): round(float(vec[i]), 6) for i in nz}


def _test_data(records_dir: Path, v: ValidationData) -> TestData | None:
    from ckptsel.records.scan import read_rows

    rows = read_rows(
        records_dir, "generations", columns=["trajectory"], filters=[("split", "=", "test"), ("trajectory", "=", v.trajectory)]
    )
    if rows is None or rows.num_rows == 0:
        return None
    test = next(t for t in load_test(records_dir) if t.trajectory == v.trajectory)
    if not np.array_equal(test.steps, v.steps):
        raise CkptselError(
            f"trajectory {v.trajectory!r}: validation and test records disagree on its checkpoints "
            f"(validation: {v.steps.tolist()}, test: {test.steps.tolist()})"
        )
    return test


JITTER_DRAWS = WINNER_JITTER  # nodes over the winner's rounding cell (stats.winners; nothing random)
# the model confidence set's bootstrap stream and size: fixed, so neither --seed nor --draws moves
# the plausibly-best set; counts drawn MCS_CHUNK draws at a time (memory)
WINNER_STREAM_SEED = 0
MCS_DRAWS = 2000
MCS_CHUNK = 250


def exact_holdouts(correct: np.ndarray, groups: np.ndarray, x: np.ndarray, level: float) -> np.ndarray:
    """``(T,)`` the checkpoints an exact paired test cannot tell from the most accurate one (the
    first of ``argmax x``): the clustered McNemar p (the exact binomial one for single items)
    above ``1 − level``; such a checkpoint stays plausibly best whatever the model confidence
    set says."""
    w = int(np.argmax(x))
    return np.array([k != w and clustered_mcnemar(correct[w], correct[k], groups) > 1.0 - level + 1e-12 for k in range(len(correct))])


def best_checkpoints(
    correct: np.ndarray, groups: np.ndarray, steps: np.ndarray, settings: SelectSettings
) -> tuple[PlausiblyBest, ChosenEstimate]:
    """The plausibly-best set and the selection-corrected estimate of one trajectory's
    validation ``correct`` (T, n), items clustered by ``groups`` (n,). Draws: the MCS bootstrap
    counts (:data:`MCS_DRAWS` of them) from ``[WINNER_STREAM_SEED, SELECT_WINNER, 0]`` whatever
    ``--seed`` and ``--draws`` (so the set does not move with ``--seed``); the chosen estimate has
    nothing random (:func:`ckptsel.stats.winner_interval`). Both depend on the data alone."""
    clusters = Clusters.of(groups, correct.shape[1])
    x, sums, sigma = accuracy_moments(correct[None], clusters)
    rng = streams.generator(WINNER_STREAM_SEED, streams.SELECT_WINNER, 0)
    chunks = (resample_counts(clusters.count, MCS_CHUNK, rng) for _ in range(MCS_DRAWS // MCS_CHUNK))
    xb = np.concatenate([bootstrap_accuracies(sums, clusters.sizes, c) for c in chunks], axis=1)
    mcs = model_confidence_set(x, sigma, xb, settings.level)
    order = mcs["order"][0]
    gone = sorted((int(k) for k in np.flatnonzero(order >= 0)), key=lambda k: order[k])
    eliminations = tuple(
        {
            "set_size": len(steps) - j,
            "statistic": round(float(mcs["statistic"][0, j]), 6),
            "p_value": round(float(mcs["p_steps"][0, j]), 6),
            "eliminated": int(steps[k]),
            "rejected": bool(mcs["p_mcs"][0, k] < 1 - settings.level),
        }
        for j, k in enumerate(gone)
    )
    held = exact_holdouts(correct, groups, x[0], settings.level) & ~mcs["in_set"][0]
    best = PlausiblyBest(
        steps=tuple(int(steps[k]) for k in np.flatnonzero(mcs["in_set"][0] | held)),
        level=settings.level,
        mcs_p_values={str(int(st)): round(float(p), 6) for st, p in zip(steps, mcs["p_mcs"][0], strict=True)},
        eliminations=eliminations,
        draws=MCS_DRAWS,
        clusters=clusters.count,
        kept_by_exact_test=tuple(int(steps[k]) for k in np.flatnonzero(held)),
    )
    mean, lo, hi, _ = winner_interval(x, sigma, correct.shape[1], clusters.count, settings.level, jitter=JITTER_DRAWS)
    n_mean, n_lo, n_hi = naive_winner(x, sigma, settings.level)
    top = np.flatnonzero(x[0] >= x[0].max() - 1e-12)
    chosen = ChosenEstimate(
        tuple(int(steps[k]) for k in top),
        *(round(float(100.0 * v[0]), 6) for v in (mean, lo, hi, n_mean, n_lo, n_hi)),
        level=settings.level,
        jitter_draws=JITTER_DRAWS,
        exact=bool(without_variance(x, sigma)[0]),
    )
    return best, chosen


def select_checkpoint(
    records_dir: Path,
    trajectory: str,
    *,
    rule: str = "accuracy",
    settings: SelectSettings | None = None,
    answers: AnswerSettings | None = None,
    own: tuple[UserRule, ...] = (),
) -> Selection:
    """Everything ``ckptsel select`` reports (see the module docstring); ``to_dict()`` is its
    JSON. ``answers``: when a checkpoint reads as degenerate, and whether one may be kept;
    ``own``: a researcher's rules (:func:`~ckptsel.choose.rules.user_rule`), reported beside the
    built-in ones (``rule`` may name one)."""
    with single_threaded():
        return _select_checkpoint(records_dir, trajectory, rule, settings or SelectSettings(), answers, own=own)


SELECT_MEMORY_LIMIT = 8 * 2**30  # bytes the largest intermediate arrays may take


def _check_select_memory(settings: SelectSettings, n: int, checkpoints: int) -> None:
    """The (draws × items) resampling weights and (partitions × items) masks must fit in memory."""
    need = 8 * n * (3 * settings.draws + 2 * settings.partitions)
    need += 8 * settings.draws * settings.bootstrap_partitions * checkpoints
    if need > SELECT_MEMORY_LIMIT:
        raise CkptselError(
            f"--draws {settings.draws} / --partitions {settings.partitions} with {n} validation items "
            f"would need about {need / 2**30:.0f} GiB; lower --draws or --partitions"
        )


@dataclass(frozen=True)
class _Pool:
    """What the trajectories of one validation pool (the same items and groups) share: the
    partition masks ``in_s`` (P, n), the question-bootstrap weights (draws, n), the number of
    validation clusters and the two half sizes."""

    in_s: np.ndarray
    weights: np.ndarray
    clusters: int
    halves: tuple[int, int]

    @classmethod
    def of(cls, v: ValidationData, settings: SelectSettings) -> _Pool:
        n = len(v.item_ids)
        in_s = partition_masks(v.item_ids, settings.partitions, settings.seed, v.groups)
        weights, clusters = question_weights(v.groups, n, settings.draws, streams.generator(settings.seed, streams.SELECT_VALIDATION_DRAWS))
        first = int(round(float(in_s.sum(axis=1).mean())))  # ⌊n/2⌋; about that with groups
        return cls(in_s, weights, clusters, (first, n - first))

    def gains(
        self, sigs: list[np.ndarray], vs: list[ValidationData], maximize: bool, settings: SelectSettings
    ) -> list[tuple[float, np.ndarray]]:
        """Per trajectory of this pool (signal ``(T_k, n)`` of the rule, validation data): the
        split-validation point estimate (every partition) and its ``(draws,)`` replicates (the
        first ``bootstrap_partitions`` partitions)."""
        corrects = [v.correct for v in vs]
        n = self.in_s.shape[1]
        points = pooled_split_gains(sigs, corrects, maximize, self.in_s, np.ones((1, n)))
        reps = pooled_split_gains(sigs, corrects, maximize, self.in_s[: settings.bootstrap_partitions], self.weights)
        return [(float(p[0]), r) for p, r in zip(points, reps, strict=True)]

    def estimate(
        self, point: float, reps: np.ndarray, full: np.ndarray, v: ValidationData, settings: SelectSettings
    ) -> SplitValidationGain:
        """The split-validation gain of the full-pool choice ``full`` (T,) of trajectory ``v``."""
        gain = gain_estimate(
            point,
            reps,
            settings.level,
            self.clusters,
            "validation",
            choice_p(full, v.correct, v.groups, settings.seed, settings.level),
            discordant_clusters(full, v.correct, v.groups),
        )
        return SplitValidationGain(gain, settings.partitions, self.halves, self.clusters)


def _check_splittable(v: ValidationData, settings: SelectSettings) -> None:
    """At least two eligible validation items, and the split's arrays fit in memory."""
    n = len(v.item_ids)
    if n < 2:
        raise CkptselError(f"trajectory {v.trajectory!r}: only {n} eligible validation item(s); cannot split validation")
    _check_select_memory(settings, n, len(v.steps))


def _no_nll(rule: str, trajectory: str | None = None) -> CkptselError:
    whose = "the records have" if trajectory is None else f"trajectory {trajectory!r} has"
    return CkptselError(f"--rule {rule}: {whose} no validation NLL records; use accuracy or agreement")


def nll_skipped(validation: list[ValidationData]) -> list[str]:
    """The trajectories without validation NLL records when others have them (an ingested
    harness's generations beside a measured run): the rules that need NLL skip them."""
    if not any(MATCHED_WINDOW in v.nll for v in validation):
        return []
    return [v.trajectory for v in validation if MATCHED_WINDOW not in v.nll]


def nll_skip_line(trajectories: list[str]) -> str:
    """What is said, once, of :func:`nll_skipped`'s trajectories."""
    shown = ", ".join(repr(t) for t in trajectories[:10]) + (" …" if len(trajectories) > 10 else "")
    return (
        f"{len(trajectories)} trajectory(ies) without validation NLL records ({shown}; the others "
        "have them): the matched-NLL rule, and every H (gain over matched NLL), skip them"
    )


@dataclass(frozen=True)
class _Split:
    """What every rule's split-validation gain of one trajectory shares: its validation data,
    the rules' full-pool and budget choices and signals, and its pool's partitions and
    question-bootstrap weights."""

    v: ValidationData
    chosen: dict
    sig: dict[str, np.ndarray]
    pool: _Pool
    specs: dict[str, RuleSpec]

    @property
    def clusters(self) -> int:
        return self.pool.clusters

    @classmethod
    def of(cls, v: ValidationData, rule: str, settings: SelectSettings, own: tuple[UserRule, ...] = (), extras=None) -> _Split:
        """``own``: a researcher's rules (bound), chosen with beside the built-in ones; they run
        on the validation records only (test records refused meanwhile)."""
        _check_splittable(v, settings)
        averages = averages_of([v])  # each a fixed choice; its split gain is the average's own on held-out halves
        choice = ChoiceSettings(permutations=settings.permutations, seed=settings.seed, rules=own, averages=averages)
        specs = rule_specs(own, extras, averages)
        with validation_only():
            chosen = choose_trajectory(v, choice, extras=extras)
            sig = signals(v, specs)
        sig.update({r: fixed_signal(v.steps, s.fixed_step, len(v.item_ids)) for r, s in specs.items() if s.fixed_step is not None})
        pool = _Pool.of(v, settings)
        if rule not in sig:
            if AVERAGE_RULE_RE.fullmatch(rule):
                held = ", ".join(candidate_name(a) for a in averages) or "none"
                raise CkptselError(
                    f"trajectory {v.trajectory!r}: rule {rule!r} keeps an average its records do not hold (averages: {held})"
                )
            raise _no_nll(rule, v.trajectory)
        return cls(v, chosen, sig, pool, specs)

    def gain(self, r: str, settings: SelectSettings) -> SplitValidationGain:
        """Rule ``r``'s split-validation gain over the final checkpoint."""
        ((point, reps),) = self.pool.gains([self.sig[r]], [self.v], self.specs[r].maximize, settings)
        return self.pool.estimate(point, reps, self.chosen[("nested", r, FULL)], self.v, settings)

    def steps_of(self, r: str) -> tuple[int, ...]:
        """Rule ``r``'s full-pool choice (its tie set)."""
        return chosen_steps(self.chosen[("nested", r, FULL)], self.v.steps)


def fixed_signal(steps: np.ndarray, step: int, n: int) -> np.ndarray:
    """``(T, n)`` int64 signal that every subset maximizes at the row of ``step`` (a fixed choice
    as a rule: its split-validation gain is that candidate's gain over the final checkpoint)."""
    return np.broadcast_to((np.asarray(steps) == step).astype(np.int64)[:, None], (len(steps), n)).copy()


def chosen_steps(full: np.ndarray, steps: np.ndarray) -> tuple[int, ...]:
    """The steps of a full-pool choice ``full`` (T,): its tie set."""
    return tuple(int(steps[i]) for i in np.flatnonzero(full > 0))


def _check_rule(rule: str, own: tuple[UserRule, ...]) -> None:
    known = [*SIGNAL_RULES, *(u.name for u in own)]
    if rule not in known and not AVERAGE_RULE_RE.fullmatch(rule):
        raise CkptselError(f"unknown rule {rule!r}; choose from {known} (or your own: --rule FILE.py:function)")


def _select_checkpoint(
    records_dir: Path,
    trajectory: str,
    rule: str,
    settings: SelectSettings,
    answers: AnswerSettings | None = None,
    validation: list[ValidationData] | None = None,
    own: tuple[UserRule, ...] = (),
) -> Selection:
    _check_rule(rule, own)
    validation = load_validation(records_dir) if validation is None else validation
    v = find_trajectory(validation, trajectory, "validation", records_dir)
    skipped = nll_skipped(validation)
    notes = (
        (
            f"trajectory {v.trajectory!r} has no validation NLL records (other trajectories of "
            "these records do): the nll rule is skipped for it",
        )
        if v.trajectory in skipped
        else ()
    )
    answers = answers or AnswerSettings()
    steps = v.steps
    n = len(v.item_ids)
    if n < 2:
        raise CkptselError(f"trajectory {trajectory!r}: only {n} eligible validation item(s); cannot split validation")
    test = _test_data(records_dir, v)
    as_measured = v
    v, test, fb, more = _answers_counted(records_dir, v, test, answers)
    check = AnswerCheck.of(v, answers)
    split = _Split.of(v, rule, settings, own, ValidationExtras(records_dir))
    labels = labels_of(b for b in BUDGETS if b <= n)
    best, chosen_estimate = best_checkpoints(v.correct, v.groups, steps, settings)
    rules = {}
    for r in (r for r in split.specs if r in split.sig):
        full = split.chosen[("nested", r, FULL)]
        rules[r] = RuleSelection(
            steps=split.steps_of(r),
            probabilities=_probabilities(full, steps),
            budget_curve=tuple(_budget_pick(split.chosen[("nested", r, b)], b, steps) for b in labels),
            split_validation=split.gain(r, settings),
            test=None if test is None else test_gain(full, test, settings.draws, settings.seed, settings.level),
        )
    sel = Selection(
        trajectory=v.trajectory,
        configuration=v.configuration,
        task=v.task,
        steps=tuple(int(s) for s in steps),
        validation_items=n,
        validation_clusters=split.clusters,
        validation_exclusions={k: int(c) for k, c in v.exclusions.items()},
        test_items=None if test is None else len(test.item_ids),
        settings=settings,
        rules=rules,
        recommendation=recommend(rules[rule], rule, int(steps[-1]), settings.level, check),
        plausibly_best=best,
        chosen_estimate=chosen_estimate,
        answer_check=check,
        notes=(*notes, *more),
    )
    return _with_fallback(sel, as_measured, fb, rule, settings, answers)


def _answers_counted(
    records_dir: Path, v: ValidationData, test: TestData | None, answers: AnswerSettings
) -> tuple[ValidationData, TestData | None, np.ndarray | None, tuple[str, ...]]:
    """The trajectory's validation and test data as ``select`` counts them (``--strict-answers``:
    an answer only a fallback found is wrong), the ``(T, n)`` validation fallback matrix (None:
    not known) and what is to be said of it."""
    fb = fallback_matrix(records_dir, v.trajectory, v.task, v.steps, v.item_ids, "validation")
    if not answers.strict:
        return v, test, fb, ()
    if fb is None:
        raise CkptselError(
            f"--strict-answers: trajectory {v.trajectory!r} recorded no generated texts of its "
            f"validation items, or its task {v.task!r} is no registered task, so which answers only "
            "an answer rule's fallback found is not known"
        )
    v = replace(v, correct=v.correct & ~fb)
    if test is None:
        return v, test, fb, ()
    fb_test = fallback_matrix(records_dir, test.trajectory, test.task, test.steps, test.item_ids, "test")
    if fb_test is None:
        return (
            v,
            test,
            fb,
            ("--strict-answers: no generated texts of the test items were recorded, so the test gains count every correct answer",),
        )
    return v, replace(test, correct=test.correct & ~fb_test), fb, ()


def _with_fallback(
    sel: Selection, v: ValidationData, fb: np.ndarray | None, rule: str, settings: SelectSettings, answers: AnswerSettings
) -> Selection:
    """``sel`` with the share of each checkpoint's correct validation answers that only a
    fallback found (``v``: as measured); a recommendation of an earlier checkpoint that rests
    on them (with them counted wrong its gain is not resolved above 0) says so."""
    if fb is None:
        return sel
    shares = fallback_shares(v.correct, fb)
    rec = sel.recommendation
    check = FallbackCheck({str(int(st)): round(float(x), 6) for st, x in zip(v.steps, shares, strict=True)}, answers.strict)
    if answers.strict or rec.keep_final or not (v.correct & fb).any():
        return replace(sel, fallback=check)
    strict = _Split.of(replace(v, correct=v.correct & ~fb), rule, settings)
    gain, picks = strict.gain(rule, settings).estimate, strict.steps_of(rule)
    share = 100 * check.shares[str(rec.keep_step)]
    holds = gain.estimable and not gain.unresolved and gain.lo > 0 and rec.keep_step in picks
    said = (
        f"; {share:.0f}% of step {rec.keep_step}'s correct validation answers were found only by the "
        f"answer rule's fallback: counted wrong (--strict-answers), the {rule} rule picks step(s) "
        f"{', '.join(map(str, picks))} with a split-validation gain of {fmt(gain, unit=' pp', mark=False)}"
    )
    said += ", still resolved above 0" if holds else (", not resolved above 0: the decision rests on answers only the fallback found")
    return replace(
        sel, fallback=replace(check, strict_gain=gain, strict_steps=picks), recommendation=replace(rec, reason=rec.reason + said)
    )


# --------------------------------------------------------------------------- every trajectory
@dataclass(frozen=True)
class StudySelection:
    """``ckptsel select --all``: :func:`select_checkpoint` for every trajectory of the records,
    and the table of which checkpoint to keep (``keep``, also ``summary.json``'s ``"keep"``);
    ``selections`` leaves out the trajectories ``select`` cannot answer (their row says why)."""

    keep: KeepTable
    selections: dict[str, Selection]
    notes: tuple[str, ...] = ()  # said once for the table: rules skipped, degenerate checkpoints

    def to_dict(self) -> dict:
        return {
            **self.keep.to_dict(),
            "selections": {name: sel.to_dict() for name, sel in self.selections.items()},
            "notes": list(self.notes),
        }


def select_all(
    records_dir: Path,
    *,
    rule: str = "accuracy",
    settings: SelectSettings | None = None,
    validation: list[ValidationData] | None = None,
    keep_only: bool = False,
    answers: AnswerSettings | None = None,
    own: tuple[UserRule, ...] = (),
    checks: dict[str, AnswerCheck] | None = None,
) -> StudySelection:
    """:func:`select_checkpoint` for every trajectory (``validation``: the records' validation
    data, when already loaded), in trajectory order however the records are stored (so the
    keep table's bytes do not depend on it); a trajectory it cannot answer (too few
    eligible items, no NLL records for the ``nll`` rule) keeps its final checkpoint, its row
    saying why. ``keep_only``: the keep table alone (the same rows; ``selections`` empty), for
    ``analyze``: only the rule's choice and split-validation gain are computed."""
    _check_rule(rule, own)
    if own and keep_only:
        raise CkptselError("the keep table follows a built-in rule; your own rules are for select's full answer")
    settings = settings or SelectSettings()
    selections = {}
    with single_threaded():
        validation = validation if validation is not None else load_validation(records_dir)
        validation = sorted(validation, key=lambda v: v.trajectory)
        checks = checks if checks is not None else answer_checks(validation, answers)
        if keep_only:
            rows = keep_rows(validation, rule, settings, answers, checks)
        else:
            rows = []
            for v in validation:
                try:
                    sel = _select_checkpoint(records_dir, v.trajectory, rule, settings, answers, validation, own)
                except CkptselError as err:
                    rows.append(_no_selection(v, err))
                    continue
                selections[v.trajectory] = sel
                rows.append(_keep_row(v, sel.rules[rule], sel.recommendation))
    skipped = nll_skipped(validation)
    notes = ([nll_skip_line(skipped)] if skipped else []) + degenerate_lines(validation, answers, checks)
    return StudySelection(KeepTable(rule, asdict(settings), tuple(rows)), selections, tuple(notes))


def answer_checks(validation: list[ValidationData], answers: AnswerSettings | None = None) -> dict[str, AnswerCheck]:
    """Each trajectory's :class:`AnswerCheck`, by name: computed once for the keep table and the
    warnings alike."""
    return {v.trajectory: AnswerCheck.of(v, answers) for v in validation}


def degenerate_lines(
    validation: list[ValidationData], answers: AnswerSettings | None = None, checks: dict[str, AnswerCheck] | None = None
) -> list[str]:
    """One line naming every degenerate checkpoint of ``validation`` (none: no line);
    ``checks``: their :func:`answer_checks`, when already made (with ``answers``)."""
    checks = [(v.trajectory, (checks or {}).get(v.trajectory) or AnswerCheck.of(v, answers)) for v in validation]
    flagged = [(t, c, st) for t, c in checks for st in c.flagged]
    if not flagged:
        return []
    rule = flagged[0][1].rule_words
    shown = "; ".join(f"{t!r} {c.describe(st)}" for t, c, st in flagged[:10])
    more = f"; and {len(flagged) - 10} more" if len(flagged) > 10 else ""
    allowed = flagged[0][1].settings.allow
    return [
        f"degenerate checkpoint(s) ({rule}): {shown}{more}. Their accuracy comes from the items whose "
        "gold answer is the one they give; "
        + (
            "--allow-degenerate: one may be kept, and its recommendation says it is flagged"
            if allowed
            else "none is recommended (select --allow-degenerate keeps one, saying so)"
        )
    ]


def _no_selection(v: ValidationData, err: CkptselError) -> KeepRow:
    final = int(v.steps[-1])
    return KeepRow(v.trajectory, v.configuration, final, final, True, (), None, f"no selection: {err}")


def _keep_row(v: ValidationData, chosen: RuleSelection, rec: Recommendation) -> KeepRow:
    return KeepRow(
        v.trajectory,
        v.configuration,
        int(v.steps[-1]),
        rec.keep_step,
        rec.keep_final,
        chosen.steps,
        chosen.split_validation.estimate,
        rec.reason,
    )


def keep_rows(
    validation: list[ValidationData],
    rule: str,
    settings: SelectSettings,
    answers: AnswerSettings | None = None,
    checks: dict[str, AnswerCheck] | None = None,
) -> list[KeepRow]:
    """The keep table's rows, in ``validation`` order: per trajectory ``rule``'s full-pool
    choice, its split-validation gain and the recommendation, the numbers
    :func:`select_checkpoint` gives. Trajectories of one validation pool share its partitions,
    bootstrap weights and the products of :func:`pooled_split_gains`; the full-pool choice is
    :func:`ckptsel.choose.full_pool_choice` (no budget, so no permutation, is needed)."""
    rows: list[KeepRow | None] = [None] * len(validation)
    maximize = RULES[rule].maximize
    for members in pools_of(validation):
        sigs = {}
        for j in members:
            v = validation[j]
            try:
                _check_splittable(v, settings)
                if (sig := RULES[rule].signal(v)) is None:
                    raise _no_nll(rule, v.trajectory)
                sigs[j] = sig
            except CkptselError as err:
                rows[j] = _no_selection(v, err)
        if not sigs:
            continue
        pool = _Pool.of(validation[next(iter(sigs))], settings)
        vs = [validation[j] for j in sigs]
        for (j, sig), v, (point, reps) in zip(sigs.items(), vs, pool.gains(list(sigs.values()), vs, maximize, settings), strict=True):
            full = full_pool_choice(sig, maximize)
            chosen = RuleSelection(chosen_steps(full, v.steps), {}, (), pool.estimate(point, reps, full, v, settings))
            check = (checks or {}).get(v.trajectory) or AnswerCheck.of(v, answers)
            rec = recommend(chosen, rule, int(v.steps[-1]), settings.level, check)
            rows[j] = _keep_row(v, chosen, rec)
    return rows


def keep_settings(
    seed: int = defaults.SEED, level: float = defaults.CONFIDENCE, draws: int = defaults.DRAWS, permutations: int = defaults.PERMUTATIONS
) -> SelectSettings:
    """The ``select`` settings of an analysis' keep table (``summary.json``'s ``"keep"``).

    An analysis at ``select``'s defaults or above (``draws`` ≥ its draws, ``permutations`` ≥ its
    partitions; ``analyze``'s defaults are) gets ``select``'s own defaults with the analysis'
    seed and level, so that the table is ``ckptsel select --all`` at its defaults (``select --all
    --seed S --confidence L`` where the seed or level is not the default) row for row. A quick
    analysis below them (fewer ``--draws`` or ``--permutations``) gets a table as quick — its
    permutations as partitions, at most 200 draws and 5 bootstrap partitions — which says it is
    provisional (:attr:`ckptsel.results.KeepTable.provisional`)."""
    full = SelectSettings(seed=seed, level=level)
    if draws >= full.draws and permutations >= full.partitions:
        return full
    return SelectSettings(
        partitions=permutations,
        permutations=permutations,
        seed=seed,
        level=level,
        draws=min(draws, QUICK_KEEP_DRAWS),
        bootstrap_partitions=min(permutations, QUICK_KEEP_PARTITIONS),
    )


QUICK_KEEP_DRAWS = 200  # a quick analysis' (provisional) keep table: at most this many draws
QUICK_KEEP_PARTITIONS = 5  # and bootstrap partitions


def keep_provisional(settings: SelectSettings) -> str | None:
    """Why a keep table made with ``settings`` may differ from ``select --all`` at its defaults
    (fewer partitions, draws, bootstrap partitions or permutations than those), None when it
    cannot."""
    full = SelectSettings()
    fewer = [
        f"{key.replace('_', ' ')} {getattr(settings, key)} < {getattr(full, key)}"
        for key in ("partitions", "draws", "bootstrap_partitions", "permutations")
        if getattr(settings, key) < getattr(full, key)
    ]
    if not fewer:
        return None
    return (
        f"made with fewer {', '.join(fewer)} than ckptsel select's defaults (the analysis' "
        "--permutations / --draws were below them): provisional; `ckptsel select --all` may "
        "keep other checkpoints"
    )


def _budget_pick(vec: np.ndarray, label: str, steps: np.ndarray) -> BudgetPick:
    k = int(np.argmax(vec))
    return BudgetPick(label, int(steps[k]), round(float(vec[k]), 6), _probabilities(vec, steps))


def recommend(
    result: RuleSelection, rule: str, final_step: int, level: float = defaults.CONFIDENCE, check: AnswerCheck | None = None
) -> Recommendation:
    """ "keep checkpoint X" only when the split-validation interval is wholly above 0, and X is
    not degenerate (``check``: one answer to most items), unless ``--allow-degenerate`` — then
    the recommendation says it is flagged; a flagged final checkpoint is said too."""
    rec = _recommend(result, rule, final_step, level)
    if check is None or rec.keep_step not in check.flagged:
        return rec
    what = check.describe(rec.keep_step)
    if rec.keep_final:
        return replace(rec, reason=f"{rec.reason}; note: the final checkpoint is flagged as degenerate ({what})")
    if check.settings.allow:
        return replace(rec, reason=f"{rec.reason}; FLAGGED as degenerate ({what}), kept because of --allow-degenerate")
    final = (
        f"; note: the final checkpoint is flagged as degenerate too ({check.describe(final_step)})" if final_step in check.flagged else ""
    )
    return Recommendation(
        rule,
        final_step,
        True,
        f"{rec.reason}; but {what}: a degenerate checkpoint is not recommended (its accuracy comes from "
        "the items whose gold answer is the one it gives), so keep the final checkpoint "
        f"(--allow-degenerate keeps it, saying so){final}",
    )


def _recommend(result: RuleSelection, rule: str, final_step: int, level: float) -> Recommendation:
    """:func:`recommend` before the answer check."""
    tied = list(result.steps)
    sv = result.split_validation.estimate
    pct = int(round(level * 100))
    gain = fmt(sv, unit=" pp", mark=False)
    if final_step in tied:
        also = " (tied with other checkpoints)" if len(tied) > 1 else ""
        return Recommendation(
            rule, final_step, True, f"the {rule} rule picks the final checkpoint itself{also} on the full validation pool"
        )
    if sv.estimable and not sv.unresolved and sv.lo > 0:
        candidates = [s for s in tied if s != final_step]
        keep = max(candidates)  # a tie set: the latest of the tied checkpoints
        tie_note = f" (tied with {', '.join(step_text(s) for s in tied if s != keep)}; the latest is kept)" if len(tied) > 1 else ""
        return Recommendation(
            rule,
            keep,
            False,
            f"the {rule} rule picks {'step ' if keep >= 0 else ''}{step_text(keep)}{tie_note}, and its split-validation gain over the final "
            f"checkpoint on held-out validation halves is {gain}, {pct}% interval above 0",
        )
    why = "contains 0 (unresolved)" if sv.unresolved else "is below 0"
    if sv.cannot_resolve is not None:
        why = f"cannot be resolved ({sv.cannot_resolve})"
    if not sv.estimable:
        why = f"is not estimable ({sv.not_estimable})"
    return Recommendation(
        rule,
        final_step,
        True,
        f"the {rule} rule picks step(s) {', '.join(map(step_text, tied))}, but its split-validation gain over the "
        f"final checkpoint is {gain} and the {pct}% interval {why}; without evidence that the choice "
        "beats the final checkpoint on items it did not see, keep the final checkpoint",
    )
