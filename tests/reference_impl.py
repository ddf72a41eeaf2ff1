"""Loop-based REFERENCE implementation of the analysis (SPEC §3–§6), for cross-checking the engine.

Why this exists: the engine (``ckptsel.choose`` / ``ckptsel.choose.evaluate`` / ``ckptsel.workflows.analysis``)
is vectorized for speed, and vectorized code hides its bugs well (a wrong axis, an off-by-one
prefix, a tie broken by ``argmax`` instead of averaged). This module recomputes every selection
vector and every per-trajectory quantity with plain Python loops written directly from the
SPEC wording, so that a disagreement points at a real bug in one of the two.

Independence: it reads the records tables itself (``pandas`` rows → Python dicts), builds the
eligible pools, pluralities, scores, tie sets, gains and means on its own. The only engine
functions it calls are the *shared random inputs* that define which subsets are drawn
(``ckptsel.analysis.core.permutations`` / ``one_variant_orders`` / ``string_keys``): without
them the two implementations would average over different subsets and could not be compared.
Thinned grids are recomputed here from the SPEC rule (every k-th checkpoint counted back from
the final one).

Choices made where the SPEC leaves room (kept identical to what the SPEC text implies):
* an empty answer string is an answer like any other (it can be a plurality);
* a thinned grid must keep at least two checkpoints (else there is no choice to make);
* the full budget uses the whole eligible pool once (order does not change integer counts;
  NLL sums are added in item-id order);
* matched-NLL ties are exact float64 comparisons of ``Σ nll_sum / Σ n_tokens`` where the sums
  are accumulated along the permutation order (SPEC §3: "prefix sums over the permutation order").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

BUDGETS = (32, 64, 128, 256)
ONE_VARIANT_BUDGETS = (32, 64, 128)
THINNING = (2, 3, 4)
RULES = ("accuracy", "agreement", "nll", "last")
MH_RULES = ("oracle", "agreement")
FULL = "full"


# --------------------------------------------------------------------------- inputs
@dataclass
class RefTrajectory:
    """One trajectory as plain Python lists (checkpoints in ascending step, items sorted by id)."""

    name: str
    configuration: str
    task: str
    steps: list[int]
    val_ids: list[str]
    val_groups: list[str]
    val_correct: list[list[bool]]  # [c][i]
    val_answers: list[list[str]]  # [c][i]
    val_nll: dict[int, list[list[float]]]  # window -> [c][i] nll_sum
    val_tokens: dict[int, list[int]]  # window -> [i]
    test_ids: list[str]
    test_correct: list[list[bool]]  # [c][j]
    test_answers: list[list[str]]  # [c][j]
    excluded: int = 0  # validation items dropped from the eligible pool
    extra: dict = field(default_factory=dict)


def trajectories_from_tables(gen: pd.DataFrame, nll: pd.DataFrame) -> list[RefTrajectory]:
    """Build reference trajectories from the two records tables, row by row.

    Eligible validation pool (SPEC §2/§4): items with a generation record and a window-512 NLL
    record at every checkpoint of the trajectory and a positive token count.
    """
    meta: dict[str, tuple[str, str]] = {}
    steps: dict[str, set[int]] = {}
    val: dict[str, dict[tuple[int, str], tuple[str, bool, str]]] = {}
    test: dict[str, dict[tuple[int, str], tuple[str, bool]]] = {}
    for row in gen.itertuples(index=False):
        traj = str(row.trajectory)
        meta[traj] = (str(row.configuration), str(row.task))
        steps.setdefault(traj, set()).add(int(row.step))
        key = (int(row.step), str(row.item_id))
        if row.split == "validation":
            val.setdefault(traj, {})[key] = (str(row.answer), bool(row.correct), str(row.group))
        else:
            test.setdefault(traj, {})[key] = (str(row.answer), bool(row.correct))
    nlls: dict[str, dict[int, dict[tuple[int, str], tuple[float, int]]]] = {}
    for row in nll.itertuples(index=False):
        if row.split != "validation":
            continue
        nlls.setdefault(str(row.trajectory), {}).setdefault(int(row.window), {})[(int(row.step), str(row.item_id))] = (
            float(row.nll_sum),
            int(row.n_tokens),
        )

    out = []
    for traj in sorted(meta):
        grid = sorted(steps[traj])
        vrec = val.get(traj, {})
        nrec = nlls.get(traj, {})
        n512 = nrec.get(512, {})
        candidates = sorted({item for (_, item) in vrec} | {item for (_, item) in n512})
        eligible = []
        for item in candidates:
            ok = all((s, item) in vrec and (s, item) in n512 for s in grid)
            if ok and n512[(grid[-1], item)][1] > 0:
                eligible.append(item)
        windows = [w for w in sorted(nrec) if all((s, i) in nrec[w] for s in grid for i in eligible)]
        test_items = sorted({item for (_, item) in test.get(traj, {})})
        trec = test.get(traj, {})
        out.append(
            RefTrajectory(
                name=traj,
                configuration=meta[traj][0],
                task=meta[traj][1],
                steps=grid,
                val_ids=eligible,
                val_groups=[vrec[(grid[-1], i)][2] for i in eligible],
                val_correct=[[vrec[(s, i)][1] for i in eligible] for s in grid],
                val_answers=[[vrec[(s, i)][0] for i in eligible] for s in grid],
                val_nll={w: [[nrec[w][(s, i)][0] for i in eligible] for s in grid] for w in windows},
                val_tokens={w: [nrec[w][(grid[-1], i)][1] for i in eligible] for w in windows},
                test_ids=test_items,
                test_correct=[[trec[(s, j)][1] for j in test_items] for s in grid],
                test_answers=[[trec[(s, j)][0] for j in test_items] for s in grid],
                excluded=len(candidates) - len(eligible),
            )
        )
    return out


@dataclass
class SharedOrders:
    """The random subsets both implementations must average over (engine's hash streams)."""

    validation: list[list[int]]  # [p] -> permutation of val item indices
    one_variant: list[list[int]]  # [p] -> one item index per group, in the rep's group order
    test: list[list[int]]  # [p] -> permutation of test item indices (S = first N // 2)


def shared_orders(t: RefTrajectory, permutations: int, seed: int) -> SharedOrders:
    """Ask the engine's hash functions for the subsets (the only engine code used here)."""
    from ckptsel.choose import core

    val = core.permutations(core.string_keys(t.val_ids), seed, permutations) if t.val_ids else None
    codes, names = pd.factorize(pd.Series(t.val_groups, dtype=object), sort=True)
    ov = (
        core.one_variant_orders(core.string_keys(t.val_ids), np.asarray(codes), core.string_keys(list(names)), seed, permutations)
        if t.val_ids
        else None
    )
    tst = core.permutations(core.string_keys(t.test_ids), seed, permutations, stream=4)
    return SharedOrders(
        validation=[[int(x) for x in row] for row in val] if val is not None else [[] for _ in range(permutations)],
        one_variant=[[int(x) for x in row] for row in ov] if ov is not None else [[] for _ in range(permutations)],
        test=[[int(x) for x in row] for row in tst],
    )


# --------------------------------------------------------------------------- rules
def thinned(n_checkpoints: int, k: int) -> list[int]:
    """Every k-th checkpoint counted back from the final one; the final one is always kept."""
    keep = []
    c = n_checkpoints - 1
    while c >= 0:
        keep.append(c)
        c -= k
    return sorted(keep)


def plurality(answers: Sequence[str]) -> str:
    """Most frequent answer; ties go to the answer that occurs first in the given order."""
    counts: dict[str, int] = {}
    for a in answers:
        counts[a] = counts.get(a, 0) + 1
    best = max(counts.values())
    for a in answers:  # first occurrence in ascending step order among the most frequent
        if counts[a] == best:
            return a
    raise AssertionError("unreachable")


def pluralities(answers: list[list[str]], grid: Sequence[int]) -> list[str]:
    """Per item plurality answer over the checkpoints of ``grid`` (item-local)."""
    n = len(answers[0]) if answers else 0
    return [plurality([answers[c][i] for c in grid]) for i in range(n)]


def uniform_over_best(scores: dict[int, float], maximize: bool, n_checkpoints: int) -> list[float]:
    """Probability vector over all checkpoints: uniform on the exact best set, 0 elsewhere."""
    best = None
    for s in scores.values():
        if best is None or (s > best if maximize else s < best):
            best = s
    tied = [c for c, s in scores.items() if s == best]
    probs = [0.0] * n_checkpoints
    for c in tied:
        probs[c] = 1.0 / len(tied)
    return probs


def last_vector(n_checkpoints: int) -> list[float]:
    return [0.0] * (n_checkpoints - 1) + [1.0]


def _utilities(t: RefTrajectory, rule: str, grid: Sequence[int], window: int) -> list[list[float]]:
    """Per-checkpoint, per-item contribution to the rule's score (None rows off the grid)."""
    T = len(t.steps)
    if rule == "accuracy":
        return [[1 if x else 0 for x in t.val_correct[c]] if c in grid else None for c in range(T)]
    if rule == "agreement":
        plur = pluralities(t.val_answers, grid)
        return [[1 if t.val_answers[c][i] == plur[i] else 0 for i in range(len(plur))] if c in grid else None for c in range(T)]
    if rule == "nll":
        return [list(t.val_nll[window][c]) if c in grid else None for c in range(T)]
    raise ValueError(rule)


def _score(util_row: list[float], subset: Iterable[int]) -> float:
    total = 0
    for i in subset:
        total += util_row[i]
    return total


def select(
    t: RefTrajectory,
    rule: str,
    subset: Sequence[int],
    grid: Sequence[int] | None = None,
    window: int = 512,
    utilities: list[list[float]] | None = None,
) -> list[float]:
    """Selection-probability vector (over all T checkpoints) of ``rule`` on item set ``subset``."""
    T = len(t.steps)
    grid = list(range(T)) if grid is None else list(grid)
    if rule == "last":
        return last_vector(T)
    util = utilities if utilities is not None else _utilities(t, rule, grid, window)
    scores: dict[int, float] = {}
    for c in grid:
        s = _score(util[c], subset)
        if rule == "nll":
            tokens = 0
            for i in subset:
                tokens += t.val_tokens[window][i]
            s = s / tokens
        scores[c] = s
    return uniform_over_best(scores, maximize=rule != "nll", n_checkpoints=T)


def nested_vectors(
    t: RefTrajectory,
    rule: str,
    orders: list[list[int]],
    budgets: Sequence[int],
    grid: Sequence[int] | None = None,
    window: int = 512,
    full_subset: Sequence[int] | None = None,
    full_over_orders: bool = False,
) -> dict[str, list[float]]:
    """``budget label -> vector`` averaged over the permutations; S_n = first n items of a row.

    Each permutation is walked once with running per-checkpoint sums (the SPEC's prefix sums),
    recording the tie-averaged choice whenever the prefix length hits a budget.
    """
    T = len(t.steps)
    grid = list(range(T)) if grid is None else list(grid)
    labels = [str(b) for b in budgets] + [FULL]
    if rule == "last":
        return {lab: last_vector(T) for lab in labels}
    util = _utilities(t, rule, grid, window)
    acc = {lab: [0.0] * T for lab in labels}
    P = len(orders)
    for row in orders:
        run = {c: 0 for c in grid}
        tokens = 0
        wanted = set(budgets)
        for pos, i in enumerate(row, start=1):
            for c in grid:
                run[c] += util[c][i]
            if rule == "nll":
                tokens += t.val_tokens[window][i]
            if pos in wanted:
                scores = {c: (run[c] / tokens if rule == "nll" else run[c]) for c in grid}
                vec = uniform_over_best(scores, rule != "nll", T)
                for c in range(T):
                    acc[str(pos)][c] += vec[c] / P
        if full_over_orders:
            vec = select(t, rule, row, grid, window, util)
            for c in range(T):
                acc[FULL][c] += vec[c] / P
    if not full_over_orders:
        subset = list(range(len(t.val_ids))) if full_subset is None else list(full_subset)
        acc[FULL] = select(t, rule, subset, grid, window, util)
    return acc


def one_variant_budgets(budgets: Sequence[int]) -> list[int]:
    """SPEC §6 with budgets as a setting: 32/64/128 with the default budgets, else the budgets."""
    return list(ONE_VARIANT_BUDGETS) if tuple(budgets) == BUDGETS else list(budgets)


def choose_reference(
    t: RefTrajectory, orders: SharedOrders, all_budgets: Sequence[int] = BUDGETS
) -> dict[tuple[str, str, str], list[float]]:
    """Every frozen selection vector ``(scheme, rule, budget) -> (T,)`` of one trajectory."""
    n = len(t.val_ids)
    T = len(t.steps)
    budgets = [b for b in all_budgets if b <= n]
    out: dict[tuple[str, str, str], list[float]] = {}
    for rule in RULES:
        for lab, vec in nested_vectors(t, rule, orders.validation, budgets).items():
            out[("nested", rule, lab)] = vec
        for k in THINNING if T > 1 else ():  # a one-checkpoint grid has nothing to thin
            grid = thinned(T, k)
            if len(grid) < 2:  # a thinned grid of the final checkpoint alone is no choice
                continue
            for lab, vec in nested_vectors(t, rule, orders.validation, budgets, grid=grid).items():
                out[(f"thin{k}", rule, lab)] = vec
        n_groups = len(set(t.val_groups))
        ov_budgets = [b for b in one_variant_budgets(all_budgets) if b <= n_groups]
        for lab, vec in nested_vectors(t, rule, orders.one_variant, ov_budgets, full_over_orders=True).items():
            out[("one_variant", rule, lab)] = vec
    if 0 in t.val_nll:
        for lab, vec in nested_vectors(t, "nll", orders.validation, budgets, window=0).items():
            out[("nll_complete", "nll", lab)] = vec
    return out


# --------------------------------------------------------------------------- gains
def accuracy_pp(correct_row: Sequence[bool], items: Sequence[int]) -> float:
    """100 × fraction correct over ``items``."""
    hits = 0
    for j in items:
        if correct_row[j]:
            hits += 1
    return 100.0 * hits / len(items)


def gain(q: Sequence[float], acc: Sequence[float]) -> float:
    """G = Σ_c q_c A(c) − A(c_T), in percentage points."""
    expected = 0.0
    for c in range(len(q)):
        expected += q[c] * acc[c]
    return expected - acc[-1]


def matched_half(t: RefTrajectory, rule: str, partitions: list[list[int]]) -> dict[str, float]:
    """SPEC §5: select on one half, score on both, both directions, averaged over partitions."""
    T = len(t.steps)
    N = len(t.test_ids)
    if rule == "agreement":
        plur = pluralities(t.test_answers, range(T))
        util = [[1 if t.test_answers[c][j] == plur[j] else 0 for j in range(N)] for c in range(T)]
    else:  # oracle: correctness on the very items it is scored on
        util = [[1 if x else 0 for x in t.test_correct[c]] for c in range(T)]
    g_in = g_out = 0.0
    count = 0
    for row in partitions:
        half = N // 2
        s, sbar = row[:half], row[half:]
        for sel, other in ((s, sbar), (sbar, s)):
            scores = {c: _score(util[c], sel) for c in range(T)}
            q = uniform_over_best(scores, True, T)
            a_in = [accuracy_pp(t.test_correct[c], sel) for c in range(T)]
            a_out = [accuracy_pp(t.test_correct[c], other) for c in range(T)]
            g_in += gain(q, a_in)
            g_out += gain(q, a_out)
            count += 1
    g_in /= count
    g_out /= count
    return {"G_in": g_in, "G_out": g_out, "B": g_in - g_out}


def per_trajectory(
    t: RefTrajectory, vectors: dict[tuple[str, str, str], list[float]], partitions: list[list[int]], smallest: str = "32"
) -> dict[str, float]:
    """Every per-trajectory quantity (G, H, D, matched half, NLL-control agreement), in pp.

    ``D = G(full) − G(smallest)``, ``smallest`` the label of the smallest budget."""
    T = len(t.steps)
    all_items = list(range(len(t.test_ids)))
    acc = [accuracy_pp(t.test_correct[c], all_items) for c in range(T)]
    G = {key: gain(q, acc) for key, q in vectors.items()}
    out: dict[str, float] = {}
    schemes = ["nested", "one_variant", *(f"thin{k}" for k in THINNING)]
    for scheme in schemes:
        labels = [lab for (s, r, lab) in vectors if s == scheme and r == "accuracy"]
        for lab in labels:
            for rule in RULES:
                out[f"G|{scheme}|{rule}|{lab}"] = G[(scheme, rule, lab)]
                out[f"H|{scheme}|{rule}|{lab}"] = G[(scheme, rule, lab)] - G[(scheme, "nll", lab)]
        if smallest in labels:
            for rule in RULES:
                out[f"D|{scheme}|{rule}"] = G[(scheme, rule, FULL)] - G[(scheme, rule, smallest)]
    complete = [lab for (s, r, lab) in vectors if s == "nll_complete"]
    for lab in complete:
        g0 = G[("nll_complete", "nll", lab)]
        out[f"G|nll_complete|nll|{lab}"] = g0
        for rule in ("accuracy", "agreement", "last"):
            out[f"H|nll_complete|{rule}|{lab}"] = G[("nested", rule, lab)] - g0
    if smallest in complete:
        out["D|nll_complete|nll"] = G[("nll_complete", "nll", FULL)] - G[("nll_complete", "nll", smallest)]
    if FULL in complete:
        out["same_nll_choice|nll_complete|nll|full"] = same_choice(vectors[("nested", "nll", FULL)], vectors[("nll_complete", "nll", FULL)])
    for rule in MH_RULES:
        for stat, value in matched_half(t, rule, partitions).items():
            out[f"MH|{rule}|{stat}"] = value
    return out


def same_choice(p: Sequence[float], q: Sequence[float]) -> float:
    """1 when the 512-window and complete-response NLL rules make the same (tie-averaged) choice."""
    return 1.0 if all(abs(a - b) < 1e-12 for a, b in zip(p, q, strict=True)) else 0.0


# --------------------------------------------------------------------------- study
@dataclass
class RefStudy:
    """Reference outputs for a whole records set."""

    trajectories: list[RefTrajectory]
    vectors: dict[str, dict[tuple[str, str, str], list[float]]]  # trajectory -> choices
    quantities: dict[str, dict[str, float]]  # trajectory -> name -> value (pp)
    budgets: tuple[int, ...] = BUDGETS


def analyze_reference(trajectories: list[RefTrajectory], permutations: int, seed: int, budgets: Sequence[int] = BUDGETS) -> RefStudy:
    """Choices and per-trajectory quantities for every trajectory (the deterministic part)."""
    budgets = tuple(sorted(set(budgets)))
    vectors, quantities = {}, {}
    for t in trajectories:
        orders = shared_orders(t, permutations, seed)
        vectors[t.name] = choose_reference(t, orders, budgets)
        quantities[t.name] = per_trajectory(t, vectors[t.name], orders.test, str(budgets[0]))
    return RefStudy(trajectories, vectors, quantities, budgets)


def mean_over(study: RefStudy, name: str, task: str | None = None) -> float | None:
    """Trajectory-weighted mean of one quantity (over the trajectories that have it)."""
    total, count = 0.0, 0
    for t in study.trajectories:
        if task is not None and t.task != task:
            continue
        value = study.quantities[t.name].get(name)
        if value is not None:
            total += value
            count += 1
    return total / count if count else None


def _present(study: RefStudy, name: str, task: str | None) -> bool:
    return mean_over(study, name, task) is not None


def _budget_block(study: RefStudy, scheme: str, task: str | None, labels: Sequence[str]) -> dict:
    block: dict = {}
    for rule in RULES:
        for lab in labels:
            for kind in ("G", "H"):
                m = mean_over(study, f"{kind}|{scheme}|{rule}|{lab}", task)
                if m is not None:
                    block.setdefault(rule, {}).setdefault(lab, {})[kind] = m
    return block


def summary_means(study: RefStudy, task: str | None = None) -> dict:
    """Point estimates in the shape of ``summary.json`` (values are the "mean" fields)."""
    finite = sorted(set(study.budgets) | set(one_variant_budgets(study.budgets)))
    labels = [*(str(b) for b in finite), FULL]
    out: dict = {"budget": _budget_block(study, "nested", task, labels)}
    out["D"] = {r: mean_over(study, f"D|nested|{r}", task) for r in RULES if _present(study, f"D|nested|{r}", task)}
    out["matched_half"] = {r: {s: mean_over(study, f"MH|{r}|{s}", task) for s in ("G_in", "G_out", "B")} for r in MH_RULES}
    sens: dict = {
        "one_variant": {
            "budget": _budget_block(study, "one_variant", task, labels),
            "D": {r: mean_over(study, f"D|one_variant|{r}", task) for r in RULES if _present(study, f"D|one_variant|{r}", task)},
        },
        "thinning": {},
    }
    for k in THINNING:
        block = _budget_block(study, f"thin{k}", task, labels)
        if not block:  # no trajectory with more than one checkpoint: nothing was thinned
            continue
        sens["thinning"][str(k)] = {
            "budget": block,
            "D": {r: mean_over(study, f"D|thin{k}|{r}", task) for r in RULES if _present(study, f"D|thin{k}|{r}", task)},
        }
    nc: dict = {}
    frac = mean_over(study, "same_nll_choice|nll_complete|nll|full", task)
    if frac is not None:
        nc["same_choice_fraction"] = frac
        block: dict = {}
        for lab in labels:
            for rule in RULES:
                kind = "G" if rule == "nll" else "H"
                m = mean_over(study, f"{kind}|nll_complete|{rule}|{lab}", task)
                if m is not None:
                    block.setdefault(rule, {}).setdefault(lab, {})[kind] = m
        nc["budget"] = block
    sens["nll_complete"] = nc
    out["sensitivities"] = sens
    return out
