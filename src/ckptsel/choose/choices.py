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

from ckptsel.choose import core
from ckptsel.choose.rules import H_BASELINE, RULES
from ckptsel.choose.settings import ChoiceSettings, budget_labels_for_pool
from ckptsel.defaults import THINNING
from ckptsel.records import COMPLETE_WINDOW, ValidationData


def _rule_probs(
    scores: dict[str, np.ndarray], full: dict[str, np.ndarray], labels: list[str]
) -> dict[tuple[str, str], np.ndarray]:
    """Selection vectors per (rule, budget) from prefix scores ``(T, P, B)`` and full-pool scores."""
    out = {}
    for rule in (r for r in RULES.values() if r.name in scores):
        probs = core.tie_probabilities(scores[rule.name], maximize=rule.maximize).mean(axis=1)  # (T, B)
        final = core.tie_probabilities(full[rule.name], maximize=rule.maximize)
        probs = np.concatenate([probs, final[:, None]], axis=1)
        for b, label in enumerate(labels):
            out[(rule.name, label)] = probs[:, b]
    return out


def _last(n_checkpoints: int, labels: list[str]) -> dict[tuple[str, str], np.ndarray]:
    """Rules without a signal keep the final checkpoint at every budget."""
    e = np.zeros(n_checkpoints)
    e[-1] = 1.0
    return {(r.name, label): e for r in RULES.values() if not r.chooses for label in labels}


def signals(v: ValidationData) -> dict[str, np.ndarray]:
    """Per-item validation signal ``(T, n)`` of every rule that has one for these records."""
    out = {}
    for rule in RULES.values():
        sig = rule.signal(v) if rule.chooses else None
        if sig is not None:  # e.g. without NLL records the matched-NLL rule (and H) is absent
            out[rule.name] = sig
    return out


def thinned(v: ValidationData, idx: np.ndarray) -> ValidationData:
    """The trajectory restricted to the checkpoints ``idx`` (items unchanged)."""
    return replace(
        v,
        steps=v.steps[idx],
        correct=v.correct[idx],
        answers=v.answers[idx],
        nll={w: a[idx] for w, a in v.nll.items()},
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
        orders = core.permutations(keys, settings.seed, settings.permutations)
        nested = core.NestedSubsets(orders, finite, n) if finite else None
        group_codes, group_names = pd.factorize(pd.Series(groups), sort=True)
        n_groups = len(group_names)
        ov_orders = core.one_variant_orders(
            keys, group_codes.astype(np.int64), core.string_keys(list(group_names)),
            settings.seed, settings.permutations,
        )
        ov_finite, ov_labels = budget_labels_for_pool(n_groups, settings.one_variant_budgets)
        return cls(labels, nested, ov_labels, core.NestedSubsets(ov_orders, [*ov_finite, n_groups], n))


def choose_trajectory(
    v: ValidationData, settings: ChoiceSettings, subsets: PoolSubsets | None = None
) -> dict[tuple[str, str, str], np.ndarray]:
    """All frozen selection vectors of one trajectory: ``(scheme, rule, budget) -> (T,)``."""
    T = v.correct.shape[0]
    subsets = subsets or PoolSubsets.build(v.item_ids, v.groups, settings)
    labels = subsets.labels
    P = settings.permutations
    sig = signals(v)

    def prefix(sig: np.ndarray) -> np.ndarray:
        if subsets.nested is None:
            return np.zeros((sig.shape[0], P, 0))
        return subsets.nested.sums(sig)

    out: dict[tuple[str, str, str], np.ndarray] = {}
    scores = {r: prefix(s) for r, s in sig.items()}
    full = {r: s.sum(axis=1) for r, s in sig.items()}
    for key, p in {**_rule_probs(scores, full, labels), **_last(T, labels)}.items():
        out[("nested", *key)] = p

    # complete-response NLL control: the NLL rule on window=0 sums, same subsets
    if COMPLETE_WINDOW in v.nll:
        nll0 = v.nll[COMPLETE_WINDOW]
        control = _rule_probs({H_BASELINE: prefix(nll0)}, {H_BASELINE: nll0.sum(axis=1)}, labels)
        for (rule, label), p in control.items():
            out[("nll_complete", rule, label)] = p

    # checkpoint thinning: accuracy/NLL sums are row subsets; grid-dependent signals (agreement's
    # pluralities) are redone on the thinned grid
    for k in THINNING:
        idx = core.thinned_indices(T, k)
        if len(idx) < 2:  # nothing left to choose between: the final checkpoint alone
            continue
        th_scores = {r: sc[idx] for r, sc in scores.items()}
        th_full = {r: f[idx] for r, f in full.items()}
        redo = [r for r in sig if RULES[r].grid_dependent]
        if redo:
            v_k = thinned(v, idx)
            for r in redo:
                sig_k = RULES[r].signal(v_k)
                th_scores[r], th_full[r] = prefix(sig_k), sig_k.sum(axis=1)
        for (rule, label), p in {**_rule_probs(th_scores, th_full, labels), **_last(len(idx), labels)}.items():
            vec = np.zeros(T)
            vec[idx] = p
            out[(f"thin{k}", rule, label)] = vec

    # one variant per group: per repetition one eligible variant of each group, groups reordered;
    # its last budget is "all groups", which differs by repetition, so it comes from the masks too
    for rule in (r for r in RULES.values() if r.name in sig):
        ov = subsets.one_variant.sums(sig[rule.name])
        probs = core.tie_probabilities(ov, maximize=rule.maximize).mean(axis=1)
        for b, label in enumerate(subsets.ov_labels):
            out[("one_variant", rule.name, label)] = probs[:, b]
    for (rule, label), p in _last(T, subsets.ov_labels).items():
        out[("one_variant", rule, label)] = p
    return out


def choose(validation: list[ValidationData], settings: ChoiceSettings) -> pd.DataFrame:
    """Frozen-choice table for every trajectory (rows with non-zero probability only)."""
    frames = []
    pools: dict[bytes, PoolSubsets] = {}
    for v in validation:
        key = hashlib.sha256("\n".join([*v.item_ids, "\x00", *v.groups]).encode()).digest()
        if key not in pools:  # trajectories sharing a pool share its subsets
            pools[key] = PoolSubsets.build(v.item_ids, v.groups, settings)
        picked = choose_trajectory(v, settings, pools[key])
        keys = list(picked)
        probs = np.stack([picked[k] for k in keys])  # (K, T)
        k_idx, c_idx = np.nonzero(probs)
        names = np.array(keys, dtype=object)  # (K, 3)
        frames.append(
            pd.DataFrame(
                {
                    "trajectory": v.trajectory,
                    "scheme": names[k_idx, 0],
                    "rule": names[k_idx, 1],
                    "budget": names[k_idx, 2],
                    "step": v.steps[c_idx].astype(np.int64),
                    "prob": probs[k_idx, c_idx],
                }
            )
        )
    table = pd.concat(frames, ignore_index=True)
    return table.sort_values(["trajectory", "scheme", "rule", "budget", "step"], kind="stable").reset_index(drop=True)
