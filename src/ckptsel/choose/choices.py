"""Choosing: validation records → selection-probability vectors, frozen and hashed (SPEC §3, §4, §6, §7).

Nothing here can see a test record: :func:`choose` takes only :class:`ValidationData`.
:func:`freeze` writes the choices and their SHA-256; :func:`load_frozen` is the only way
to obtain a :class:`FrozenChoices`, and it verifies the hash first. Scoring accepts nothing
else. The rules (signal, direction) come from :mod:`ckptsel.choose.rules`, the budgets, thinning
factors and settings' defaults from :mod:`ckptsel.defaults`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from ckptsel._util import rng as streams
from ckptsel._util.threads import map_threads
from ckptsel.choose import core
from ckptsel.choose.rules import H_BASELINE, RULES, RuleSpec, rule_specs
from ckptsel.choose.settings import ChoiceSettings, budget_labels_for_pool
from ckptsel.defaults import THINNING
from ckptsel.errors import CkptselError
from ckptsel.records.load import ValidationData, ValidationExtras
from ckptsel.records.schema import COMPLETE_WINDOW, candidate_name, n_averages


def _rule_probs(
    scores: dict[str, np.ndarray], full: dict[str, np.ndarray], labels: list[str], rules: dict[str, RuleSpec] = RULES
) -> dict[tuple[str, str], np.ndarray]:
    """Selection vectors per (rule, budget) from prefix scores ``(T, P, B)`` and full-pool scores."""
    out = {}
    for rule in (r for r in rules.values() if r.name in scores):
        probs = core.tie_probabilities(scores[rule.name], maximize=rule.maximize).mean(axis=1)  # (T, B)
        final = core.tie_probabilities(full[rule.name], maximize=rule.maximize)
        probs = np.concatenate([probs, final[:, None]], axis=1)
        for b, label in enumerate(labels):
            out[(rule.name, label)] = probs[:, b]
    return out


def _fixed(steps: np.ndarray, labels: list[str], rules: dict[str, RuleSpec] = RULES) -> dict[tuple[str, str], np.ndarray]:
    """Rules without a signal keep one candidate at every budget: ``last`` the final checkpoint,
    an average's rule that average (absent from ``steps``, e.g. a thinned grid: no choice)."""
    out = {}
    for r in (r for r in rules.values() if not r.chooses):
        at = np.flatnonzero(steps == r.fixed_step) if r.fixed_step is not None else [len(steps) - 1]
        if len(at):
            e = np.zeros(len(steps))
            e[at[0]] = 1.0
            out.update({(r.name, label): e for label in labels})
    return out


def signals(v: ValidationData, rules: dict[str, RuleSpec] = RULES) -> dict[str, np.ndarray]:
    """Per-item validation signal ``(T, n)`` of every rule that has one for these records."""
    out = {}
    for rule in rules.values():
        sig = rule.signal(v) if rule.chooses else None
        if sig is not None:  # e.g. without NLL records the matched-NLL rule (and H) is absent
            out[rule.name] = sig
    return out


def thinned(v: ValidationData, idx: np.ndarray) -> ValidationData:
    """The trajectory restricted to the checkpoints ``idx`` (items unchanged)."""
    return replace(v, steps=v.steps[idx], correct=v.correct[idx], answers=v.answers[idx], nll={w: a[idx] for w, a in v.nll.items()})


def one_variant_orders(keys: np.ndarray, groups: np.ndarray, settings: ChoiceSettings) -> np.ndarray:
    """``(P, G)`` item indices of a pool's one-variant orders (:func:`ckptsel.choose.core.
    one_variant_orders`): its items' ``keys`` (:func:`~ckptsel.choose.core.string_keys`) and
    ``groups``, the groups in sorted order; what the one-variant subsets and their lists use."""
    group_codes, group_names = pd.factorize(pd.Series(groups), sort=True)
    return core.one_variant_orders(
        keys, group_codes.astype(np.int64), core.string_keys(list(group_names)), settings.seed, settings.permutations
    )


@dataclass
class PoolSubsets:
    """The validation subsets of one eligible pool: nested permutations and one-variant orders.

    Depends only on the item ids, their groups and the settings, so trajectories that share a
    pool share it (and every rule sees the same subsets).
    """

    labels: list[str]
    nested: core.NestedSubsets | None  # finite budgets; None when the pool is below them all
    ov_labels: list[str]
    one_variant: core.NestedSubsets

    @classmethod
    def build(cls, item_ids: np.ndarray, groups: np.ndarray, settings: ChoiceSettings) -> PoolSubsets:
        n = len(item_ids)
        keys = core.string_keys(item_ids)
        finite, labels = budget_labels_for_pool(n, settings.budgets)
        h = core.hashed_ranks(keys, settings.seed, streams.PERMUTATIONS, settings.permutations)  # (P, n)
        nested = core.NestedSubsets.of_hashes(h, finite) if finite else None  # of core.permutations
        ov_orders = one_variant_orders(keys, groups, settings)
        n_groups = ov_orders.shape[1]
        ov_finite, ov_labels = budget_labels_for_pool(n_groups, settings.one_variant_budgets)
        return cls(labels, nested, ov_labels, core.NestedSubsets(ov_orders, [*ov_finite, n_groups], n))


@dataclass
class _Signals:
    """One trajectory's signals and what summing them over the subsets needs."""

    sig: dict[str, np.ndarray]  # rule -> (T, n) validation signal
    thin: dict[int, np.ndarray]  # thinning factor k -> kept checkpoint indices (two or more)
    redo: dict[tuple[int, str], np.ndarray]  # (k, rule) -> (T_k, n) grid-dependent signal, redone
    nested: dict  # everything summed over the nested subsets (sig, redo, the window-0 NLL)
    firsts: dict  # key of a float signal -> (T,) its first identical rows

    @classmethod
    def of(cls, v: ValidationData, rules: dict[str, RuleSpec] = RULES) -> _Signals:
        sig = signals(v, rules)
        # checkpoint thinning: accuracy/NLL sums are row subsets; grid-dependent signals
        # (agreement's pluralities) are redone on the thinned grid (one checkpoint: no choice)
        # (averages are not candidates of a thinned grid: they average the checkpoints it drops)
        thin = {k: idx for k in THINNING if len(idx := core.thinned_indices(len(v.steps), k, n_averages(v.steps))) >= 2}
        redo = {(k, r): rules[r].signal(thinned(v, idx)) for k, idx in thin.items() for r in sig if rules[r].grid_dependent}
        nested: dict = {**sig, **redo}
        if COMPLETE_WINDOW in v.nll:  # complete-response NLL control: window-0 sums, same subsets
            nested[(COMPLETE_WINDOW, H_BASELINE)] = v.nll[COMPLETE_WINDOW]
        firsts = {key: core.first_identical_row(a) for key, a in nested.items() if a.dtype.kind not in "biu"}
        return cls(sig, thin, redo, nested, firsts)


def _subset_sums(subsets: core.NestedSubsets | None, sigs: list[dict], firsts: list[dict], P: int) -> list[dict]:
    """Per trajectory, ``(T_k, P, B)`` sums of every signal ``(T_k, n)`` over the subsets: the
    integer signals of all the trajectories in one float32 product (exact), the float signals
    (NLL) in one float64 product that chooses as each signal's own would
    (:meth:`~ckptsel.choose.core.NestedSubsets.ordered_sums`, with the identical-row maps ``firsts``)."""
    if subsets is None:
        return [{key: np.zeros((a.shape[0], P, 0)) for key, a in sig.items()} for sig in sigs]
    counts = [(j, key) for j, sig in enumerate(sigs) for key, a in sig.items() if a.dtype.kind in "biu"]
    summed = subsets.count_sums([sigs[j][key] for j, key in counts]) if counts else []
    out: list[dict] = [{} for _ in sigs]
    for (j, key), sums in zip(counts, summed, strict=True):
        out[j][key] = sums
    floats = [(j, key) for j, sig in enumerate(sigs) for key in sig if key not in out[j]]
    summed = subsets.ordered_sums([sigs[j][key] for j, key in floats], [firsts[j][key] for j, key in floats]) if floats else []
    for (j, key), sums in zip(floats, summed, strict=True):
        out[j][key] = sums
    return [{key: out[j][key] for key in sig} for j, sig in enumerate(sigs)]


def choose_trajectory(
    v: ValidationData, settings: ChoiceSettings, subsets: PoolSubsets | None = None, extras: ValidationExtras | None = None
) -> dict[tuple[str, str, str], np.ndarray]:
    """All frozen selection vectors of one trajectory: ``(scheme, rule, budget) -> (T,)``
    (``extras``: as :func:`choose`'s)."""
    subsets = subsets or PoolSubsets.build(v.item_ids, v.groups, settings)
    rules = rule_specs(settings.rules, extras, settings.averages)
    s = _Signals.of(v, rules)
    (prefix,) = _subset_sums(subsets.nested, [s.nested], [s.firsts], settings.permutations)
    (ov,) = _subset_sums(subsets.one_variant, [s.sig], [s.firsts], settings.permutations)
    return _choices(v, s, subsets, prefix, ov, rules)


def _choices(
    v: ValidationData, s: _Signals, subsets: PoolSubsets, prefix: dict, ov: dict, rules: dict[str, RuleSpec] = RULES
) -> dict[tuple[str, str, str], np.ndarray]:
    """:func:`choose_trajectory` from the subset sums ``(T, P, B)`` of its signals: ``prefix``
    (nested subsets, keys of ``s.nested``) and ``ov`` (one variant per group, keys of ``s.sig``)."""
    T = v.correct.shape[0]
    labels, sig = subsets.labels, s.sig
    steps = np.asarray(v.steps)
    out: dict[tuple[str, str, str], np.ndarray] = {}
    scores = {r: prefix[r] for r in sig}
    full = {r: a.sum(axis=1) for r, a in sig.items()}
    for key, p in {**_rule_probs(scores, full, labels, rules), **_fixed(steps, labels, rules)}.items():
        out[("nested", *key)] = p

    # complete-response NLL control: the NLL rule on window=0 sums, same subsets
    if COMPLETE_WINDOW in v.nll:
        nll0 = v.nll[COMPLETE_WINDOW]
        control = _rule_probs({H_BASELINE: prefix[(COMPLETE_WINDOW, H_BASELINE)]}, {H_BASELINE: nll0.sum(axis=1)}, labels)
        for (rule, label), p in control.items():
            out[("nll_complete", rule, label)] = p

    # checkpoint thinning: row subsets of the sums, the redone signals' own sums
    for k, idx in s.thin.items():
        th_scores = {r: sc[idx] for r, sc in scores.items()}
        th_full = {r: f[idx] for r, f in full.items()}
        for r in (r for r in sig if (k, r) in s.redo):
            th_scores[r], th_full[r] = prefix[(k, r)], s.redo[(k, r)].sum(axis=1)
        for (rule, label), p in {**_rule_probs(th_scores, th_full, labels, rules), **_fixed(steps[idx], labels, rules)}.items():
            vec = np.zeros(T)
            vec[idx] = p
            out[(f"thin{k}", rule, label)] = vec

    # one variant per group: per repetition one eligible variant of each group, groups reordered;
    # its last budget is "all groups", which differs by repetition, so it comes from the masks too
    for rule in (r for r in rules.values() if r.name in sig):
        probs = core.tie_probabilities(ov[rule.name], maximize=rule.maximize).mean(axis=1)
        for b, label in enumerate(subsets.ov_labels):
            out[("one_variant", rule.name, label)] = probs[:, b]
    for (rule, label), p in _fixed(steps, subsets.ov_labels, rules).items():
        out[("one_variant", rule, label)] = p
    return out


def pool_key(v: ValidationData) -> bytes:
    """The identity of a trajectory's eligible validation pool: a hash of its item ids and
    groups (trajectories with the same key see the same subsets, partitions and weights)."""
    h = hashlib.sha256()
    for a in (np.asarray(v.item_ids), np.asarray(v.groups)):
        if a.dtype.kind == "U":  # fixed-width strings: their bytes (and width) say it all
            h.update(f"{a.dtype.str}:{len(a)}:".encode())
            h.update(np.ascontiguousarray(a).tobytes())
        else:
            h.update("\n".join([*map(str, a.tolist()), f"\x00{len(a)}\x00"]).encode())
    return h.digest()


def full_pool_choice(signal: np.ndarray, maximize: bool) -> np.ndarray:
    """``(T,)`` a rule's choice on the whole pool from its signal ``(T, n)``: uniform over the
    checkpoints with the best sum (the ``FULL`` budget of :func:`choose_trajectory`, which
    needs no permutation)."""
    return core.tie_probabilities(signal.sum(axis=1), maximize=maximize)


def pools_of(validation: list[ValidationData]) -> list[list[int]]:
    """The trajectories of each validation pool (indices into ``validation``; pools in order
    of first appearance), largest pools (items × trajectories) first."""
    pools: dict[bytes, list[int]] = {}
    for j, v in enumerate(validation):
        pools.setdefault(pool_key(v), []).append(j)
    return sorted(pools.values(), key=lambda m: -len(validation[m[0]].item_ids) * len(m))


def _choose_pools(validation: list[ValidationData], settings: ChoiceSettings, rules: dict[str, RuleSpec]) -> list[dict]:
    """:func:`choose_trajectory` of every trajectory; trajectories that share a pool share its
    subsets and one product for all their integer signals. Pools run on a few threads
    (:func:`ckptsel._util.threads.map_threads`): each is its own result."""
    P = settings.permutations

    def pool(members: list[int]) -> list[dict]:
        first = validation[members[0]]
        subsets = PoolSubsets.build(first.item_ids, first.groups, settings)
        sigs = [_Signals.of(validation[j], rules) for j in members]
        firsts = [s.firsts for s in sigs]
        prefix = _subset_sums(subsets.nested, [s.nested for s in sigs], firsts, P)
        ov = _subset_sums(subsets.one_variant, [s.sig for s in sigs], firsts, P)
        return [_choices(validation[j], sigs[m], subsets, prefix[m], ov[m], rules) for m, j in enumerate(members)]

    pools = pools_of(validation)
    picked: list[dict] = [{} for _ in validation]
    for members, chosen in zip(pools, map_threads(pool, pools), strict=True):
        for j, c in zip(members, chosen, strict=True):
            picked[j] = c
    return picked


def averages_of(validation: list[ValidationData]) -> tuple[int, ...]:
    """The reserved steps of the averages every trajectory's records hold (ascending); trajectories
    that hold different averages are refused in one line (an average's G and intervals pool
    every trajectory, as ``last``'s do)."""
    held = {v.trajectory: tuple(int(s) for s in v.steps[: n_averages(v.steps)]) for v in validation}
    kinds = sorted(set(held.values()))
    if len(kinds) > 1:
        a, b = (next(t for t, h in sorted(held.items()) if h == k) for k in kinds[:2])
        raise CkptselError(
            f"trajectory {a!r} has the averages {_names(held[a])} and trajectory {b!r} has {_names(held[b])}: "
            "measure the same averages for every trajectory (ckptsel average, then ckptsel measure)"
        )
    return kinds[0] if kinds else ()


def _names(steps: tuple[int, ...]) -> str:
    return "[" + ", ".join(candidate_name(s) for s in steps) + "]" if steps else "none"


def choose(validation: list[ValidationData], settings: ChoiceSettings, extras: ValidationExtras | None = None) -> pd.DataFrame:
    """Frozen-choice table for every trajectory (rows with non-zero probability only), sorted by
    trajectory, scheme, rule, budget and step. ``extras``: what a researcher's rule may read of the
    validation records beyond these arrays (texts, score columns)."""
    picked = _choose_pools(validation, settings, rule_specs(settings.rules, extras, settings.averages))
    names = [v.trajectory for v in validation]
    steps = [v.steps.astype(np.int64) for v in validation]
    # rows are made in table order: trajectories and keys sorted, steps ascending (the loaded
    # order); otherwise (a repeated trajectory name, unsorted steps) the table is sorted after
    in_order = len(set(names)) == len(names) and all((np.diff(st) > 0).all() for st in steps)
    order = sorted(range(len(validation)), key=names.__getitem__) if in_order else range(len(validation))
    cols: dict[str, list] = {c: [] for c in ("trajectory", "scheme", "rule", "budget", "step", "prob")}
    for j in order:
        keys = sorted(picked[j]) if in_order else list(picked[j])
        probs = np.stack([picked[j][k] for k in keys])  # (K, T)
        k_idx, c_idx = np.nonzero(probs)
        key_names = np.array(keys, dtype=object)  # (K, 3)
        cols["trajectory"].append(np.full(len(k_idx), names[j], dtype=object))
        for c, col in enumerate(("scheme", "rule", "budget")):
            cols[col].append(key_names[k_idx, c])
        cols["step"].append(steps[j][c_idx])
        cols["prob"].append(probs[k_idx, c_idx])
    table = pd.DataFrame({c: np.concatenate(parts) for c, parts in cols.items()})
    if in_order:
        return table
    return table.sort_values(["trajectory", "scheme", "rule", "budget", "step"], kind="stable").reset_index(drop=True)
