"""Pure array functions behind every rule, budget and diagnostic (no I/O, no pandas).

Shapes: ``T`` checkpoints (ascending step, the last is the final checkpoint), ``n`` items,
``P`` permutations/partitions/repetitions, ``B`` budgets.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ckptsel._util import rng as streams
from ckptsel._util.threads import map_threads
from ckptsel.choose import core
from ckptsel.choose.core import tie_probabilities
from ckptsel.choose.frozen import FrozenChoices
from ckptsel.choose.rules import H_BASELINE, MATCHED_HALF_RULES, RULE_ORDER, RULES
from ckptsel.choose.settings import FULL, ChoiceSettings, labels_of
from ckptsel.defaults import BUDGETS, ONE_VARIANT_BUDGETS, THINNING
from ckptsel.errors import CkptselError
from ckptsel.records.load import TestData
from ckptsel.records.schema import n_averages


# --------------------------------------------------------------------------- matched half
def selection_halves(orders: np.ndarray) -> np.ndarray:
    """``(N, P)`` float32 indicator of ``S``, the first ⌊N/2⌋ items of each order row (P × N)."""
    n_items = orders.shape[1]
    in_s = np.zeros((n_items, orders.shape[0]), dtype=np.float32)
    in_s[orders[:, : n_items // 2], np.arange(orders.shape[0])[:, None]] = 1.0
    return in_s


def matched_half(
    correct: np.ndarray, agree: np.ndarray, orders: np.ndarray | None, in_s: np.ndarray | None = None, on_s: np.ndarray | None = None
) -> dict[str, dict[str, float]]:
    """Same-item optimism on the test pool (SPEC §5), averaged over partitions and directions.

    ``orders`` (P, N) are random orders of the test items; the first ⌊N/2⌋ form ``S``. The
    rule selects on ``S`` (oracle: correctness counts; agreement: agreement counts) and the
    same choice is scored on ``S`` (G_in) and on ``S̄`` (G_out); then the roles swap.
    ``in_s``: the ``(N, P)`` indicator of ``S`` (:func:`selection_halves` of ``orders``), when the
    caller has it (then ``orders`` may be None); ``on_s``: the ``(2T, P)`` counts on ``S`` of the
    rows of ``correct`` then ``agree`` (:func:`half_counts`), when the caller has them.
    """
    n_items = correct.shape[1]
    half = n_items // 2
    sizes = np.array([half, n_items - half], dtype=np.float64)
    counts = np.concatenate([correct, agree]).astype(np.float32)  # (2T, N)
    if on_s is None:
        on_s = half_counts([counts], selection_halves(orders) if in_s is None else in_s)[0]
    totals = counts.sum(axis=1, keepdims=True, dtype=np.float64)  # (2T, 1)
    T = correct.shape[0]
    acc_s, agr_s = on_s[:T], on_s[T:]
    acc_halves = np.stack([acc_s, totals[:T] - acc_s])  # (2, T, P): counts on S, S̄
    signals = {"oracle": acc_halves}
    signals["agreement"] = np.stack([agr_s, totals[T:] - agr_s])
    acc_rate = acc_halves / sizes[:, None, None]  # (2, T, P)
    out: dict[str, dict[str, float]] = {}
    for rule, sig in signals.items():
        g_in = []
        g_out = []
        for d in (0, 1):  # select on half d, score on half d (in) and 1-d (out)
            p = tie_probabilities(sig[d])  # (T, P)
            g_in.append(((p * acc_rate[d]).sum(axis=0) - acc_rate[d, -1]).mean())
            g_out.append(((p * acc_rate[1 - d]).sum(axis=0) - acc_rate[1 - d, -1]).mean())
        gi, go = 100.0 * np.mean(g_in), 100.0 * np.mean(g_out)
        out[rule] = {"G_in": gi, "G_out": go, "B": gi - go}
    return out


def half_counts(rows: list[np.ndarray], in_s: np.ndarray) -> list[np.ndarray]:
    """``(R_k, P)`` float64 sums over ``S`` (``in_s``: ``(N, P)``) of each 0/1 signal ``(R_k, N)``
    in ``rows``, all in one float32 product (exact: every sum is an integer below 2**24, so
    the same numbers however the rows are grouped)."""
    flat = (np.concatenate(rows).astype(np.float32) @ in_s).astype(np.float64)  # (ΣR_k, P)
    ends = np.cumsum([len(r) for r in rows])
    return [flat[end - len(r) : end] for r, end in zip(rows, ends, strict=True)]


SCHEMES = ("nested", "one_variant", *(f"thin{k}" for k in THINNING), "nll_complete")
MH_RULES = tuple(MATCHED_HALF_RULES)
MH_STATS = ("G_in", "G_out", "B")

Name = tuple[str, ...]


def budget_labels(settings: ChoiceSettings | None = None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(nested labels, one-variant labels) of these settings: the finite budgets, then "full"."""
    settings = settings or ChoiceSettings()
    return labels_of(settings.budgets), labels_of(settings.one_variant_budgets)


def quantity_names(settings: ChoiceSettings | None = None) -> list[Name]:
    """Every quantity in canonical order (a study has a subset of them)."""
    settings = settings or ChoiceSettings()
    nested_labels, ov_labels = budget_labels(settings)
    rules = settings.rule_names
    names: list[Name] = []
    for scheme in SCHEMES:
        labels = ov_labels if scheme == "one_variant" else nested_labels
        for budget in labels:
            for rule in rules:
                names += [("G", scheme, rule, budget), ("H", scheme, rule, budget)]
        for rule in rules:
            names.append(("D", scheme, rule, ""))
    names += [("MH", rule, stat, "") for rule in MH_RULES for stat in MH_STATS]
    names.append(("same_nll_choice", "nll_complete", "nll", FULL))
    return names


def trajectory_weights(vectors: dict[tuple[str, str, str], np.ndarray], n_checkpoints: int, d_from: str = "32") -> dict[Name, np.ndarray]:
    """Weight vectors over checkpoints of every linear quantity this trajectory has.

    ``D`` is full minus the budget labelled ``d_from`` (the smallest budget)."""
    final = np.zeros(n_checkpoints)
    final[-1] = 1.0
    rules = [*RULES, *sorted({rule for _, rule, _ in vectors} - set(RULES))]  # built-in, then a researcher's
    out: dict[Name, np.ndarray] = {}
    for (scheme, rule, budget), q in vectors.items():
        if scheme == "nll_complete":
            continue
        out[("G", scheme, rule, budget)] = q - final
        nll = vectors.get((scheme, H_BASELINE, budget))
        if nll is not None:
            out[("H", scheme, rule, budget)] = q - nll
    for (scheme, _rule, budget), q in vectors.items():
        if scheme == "nll_complete":  # G of the window-0 NLL rule; H of every rule against it
            out[("G", scheme, H_BASELINE, budget)] = q - final
            for r in rules:
                base = vectors.get(("nested", r, budget))
                if base is not None and r != H_BASELINE:
                    out[("H", scheme, r, budget)] = base - q
    for scheme in SCHEMES:
        for rule in rules:
            full, small = vectors.get((scheme, rule, FULL)), vectors.get((scheme, rule, d_from))
            if full is not None and small is not None:
                out[("D", scheme, rule, "")] = full - small
    return out


@dataclass
class ScoredChoices:
    """Per-trajectory results and what the bootstraps need; no I/O, no test rows beyond arrays."""

    trajectories: list[str]
    configurations: list[str]
    tasks: list[str]
    names: list[Name]
    values: np.ndarray  # (J, Q), NaN where a trajectory lacks the quantity
    linear: np.ndarray  # (Q,) bool: nested-scheme w·A quantity, given per-question utilities
    test_items: dict[str, int]  # task -> test pool size
    # task -> (K_task, N, Q_lin): per-configuration sums of per-question utilities, configurations
    # in sorted order, quantities in ``linear_names`` order
    utilities: dict[str, np.ndarray] = field(default_factory=dict)
    test_accuracy: dict[str, np.ndarray] = field(default_factory=dict)  # trajectory -> (T,) pp
    steps: dict[str, np.ndarray] = field(default_factory=dict)
    budgets: tuple[int, ...] = BUDGETS  # the finite budgets the choices were made at
    one_variant_budgets: tuple[int, ...] = ONE_VARIANT_BUDGETS

    @property
    def d_from(self) -> int:
        """``D = G(full) − G(d_from)``: the smallest budget."""
        return self.budgets[0]

    groups: dict[str, np.ndarray] = field(default_factory=dict)  # task -> (N,) item clusters
    rules: tuple[str, ...] = RULE_ORDER  # every rule chosen with, built-in first

    @property
    def linear_names(self) -> list[Name]:
        return [n for n, lin in zip(self.names, self.linear, strict=True) if lin]


def score(frozen: FrozenChoices, tests: list[TestData], partitions: int | None = None, *, workers: int | None = None) -> ScoredChoices:
    """Score frozen choices on the test records (choices first, test data second, by type).

    ``workers``: threads for the trajectories (default: :func:`ckptsel._util.threads.map_threads`'
    own; 1 when other work runs beside, since their many small array steps mostly hold the GIL)."""
    settings = frozen.settings
    partitions = partitions or settings.permutations
    all_names = quantity_names(settings)
    index = {n: k for k, n in enumerate(all_names)}
    J = len(tests)
    values = np.full((J, len(all_names)), np.nan)
    halves: dict[bytes, np.ndarray] = {}  # test pool -> (N, P) indicator of S
    chosen = [frozen.vectors(t.trajectory, t.steps) for t in tests]
    pools: dict[bytes, list[int]] = {}  # trajectories of one task share the test pool's partitions
    for j, t in enumerate(tests):
        key = t.item_ids.tobytes()
        if key not in halves:
            # S: the first half of each core.permutations order of the test items (stream MATCHED_HALF)
            h = core.hashed_ranks(core.string_keys(t.item_ids), settings.seed, streams.MATCHED_HALF, partitions)
            halves[key] = core.first_of_orders(h, [len(t.item_ids) // 2])[:, 0, :].astype(np.float32)
        pools.setdefault(key, []).append(j)
    agree = [core.agreement_with_checkpoints(t.answers, n_averages(t.steps)) for t in tests]
    on_s: list[np.ndarray] = [np.empty(0)] * J  # (2T, P) counts on S of correct and agree rows
    for key, members in pools.items():  # one product per test pool
        sums = half_counts([np.concatenate([tests[j].correct, agree[j]]) for j in members], halves[key])
        for j, counts in zip(members, sums, strict=True):
            on_s[j] = counts

    def one(j: int) -> dict[Name, np.ndarray]:  # trajectory j's weights; its row of ``values``
        t, vectors = tests[j], chosen[j]
        w = trajectory_weights(vectors, len(t.steps), str(settings.d_from))
        acc = 100.0 * t.correct.mean(axis=1)
        for name, vec in w.items():
            values[j, index[name]] = vec @ acc
        for rule, stats in matched_half(t.correct, agree[j], None, on_s=on_s[j]).items():
            for stat, val in stats.items():
                values[j, index[("MH", rule, stat, "")]] = val
        a, b = vectors.get(("nested", "nll", FULL)), vectors.get(("nll_complete", "nll", FULL))
        if a is not None and b is not None:
            values[j, index[("same_nll_choice", "nll_complete", "nll", FULL)]] = float(np.array_equal(a, b))
        return w

    # trajectories on a few threads: each writes only its own row
    weights: list[dict[Name, np.ndarray]] = map_threads(one, range(J), workers)
    test_accuracy = {t.trajectory: 100.0 * t.correct.mean(axis=1) for t in tests}
    steps = {t.trajectory: t.steps for t in tests}

    present = ~np.all(np.isnan(values), axis=0)
    names = [n for n, keep in zip(all_names, present, strict=True) if keep]
    values = values[:, present]
    linear = np.array([n[0] in ("G", "H", "D") and n[1] == "nested" for n in names])
    lin_names = [n for n, lin in zip(names, linear, strict=True) if lin]
    configurations = [t.configuration for t in tests]
    utilities: dict[str, np.ndarray] = {}
    groups: dict[str, np.ndarray] = {}
    test_items: dict[str, int] = {}
    for task in sorted({t.task for t in tests}):
        members = [j for j, t in enumerate(tests) if t.task == task]
        task_configs = sorted({configurations[j] for j in members})
        n_items = tests[members[0]].correct.shape[1]
        test_items[task] = n_items
        # per-configuration sums of d_i = 100 w·z_i (seeds stay together); absent quantities add 0
        util = np.zeros((len(task_configs), n_items, len(lin_names)))
        for j in members:
            t = tests[j]
            W = np.stack([weights[j].get(n, np.zeros(len(t.steps))) for n in lin_names])  # (Q, T)
            util[task_configs.index(configurations[j])] += 100.0 * (t.correct.T.astype(np.float64) @ W.T)
        utilities[task] = util
        if tests[members[0]].groups is not None:
            groups[task] = tests[members[0]].groups
            for j in members:  # one clustering per test pool
                if not np.array_equal(tests[j].groups, groups[task]):
                    raise CkptselError(
                        f"trajectory {tests[j].trajectory!r}: the test items' groups differ from "
                        f"those of trajectory {tests[members[0]].trajectory!r} (same {task} test pool)"
                    )
    return ScoredChoices(
        trajectories=[t.trajectory for t in tests],
        configurations=configurations,
        tasks=[t.task for t in tests],
        names=names,
        values=values,
        linear=linear,
        test_items=test_items,
        utilities=utilities,
        test_accuracy=test_accuracy,
        steps=steps,
        budgets=settings.budgets,
        one_variant_budgets=settings.one_variant_budgets,
        groups=groups,
        rules=settings.rule_names,
    )
