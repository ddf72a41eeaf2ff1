"""Simulations behind issue 44 ("honest in both directions"): what ckptsel's verdicts claim on
small designs, in both directions — false *resolved* under a null (size) and *resolved* under a
real effect (power) — and how often their intervals cover the truth.

1. **analyze's configuration family**, ``K = 2, 3, 4, 5, 6, 8`` configurations of one trajectory
   each, gains N(0, 1) (null), N(2, 1) (a 2 sd effect) and "zeros" (``round(0.4 K)`` of the
   configurations' gains exactly 0, the others N(2, 1)); methods cr2, percentile and wild through
   ``ckptsel.stats.estimates._configuration_estimates``: the resolved rate (null: size; else:
   power), the interval alone (excludes 0, before any rule) and coverage. Reference: the
   one-sample t test of the ``K`` gains (two-sided, α = 0.05); with one trajectory per
   configuration and equal sizes the CR2 / Bell–McCaffrey interval *is* that t interval (checked
   numerically on every dataset: the largest bound difference is reported).
2. **compare**, ``n`` independent items, null only-A = only-B = 0.15, effect 0.30 / 0.05 (+25 pp)
   and a small effect 0.20 / 0.10 (+10 pp), through ``paired_difference``: resolved rate,
   coverage of the truth (no interval counts as a miss; its share is reported), bounds outside
   [−100, 100], the exact McNemar test's own rejection rate (p ≤ 0.05); and the extreme design
   (A right on every item, B wrong on every item) at n = 3…10.
3. **the raw test-question percentile bootstrap** (``clustered_means`` + ``percentile_interval``,
   the interval alone, no rule): its size under a symmetric null, per-item utilities averaged
   over 3 trajectories of {−1, 0, +1} differences (and single-trajectory {−1, 0, +1}
   differences), n = 3…200: from which n it stays within 5% + 2 Monte-Carlo SE (it never does
   strictly: about 5 + O(1/n) %, so ckptsel never lets it decide alone); and (3b) the verdict
   as ckptsel reads it now, with the exact sign-flip test too, under the null and a +15 pp effect.
4. **select's test gain vs compare** on the same chosen and final checkpoints and test items
   (T = 5 checkpoints, n = 8, 10, 20, 40; the checkpoint chosen by accuracy on an independent
   validation set of n items): the share of datasets whose verdicts (resolved or not) differ.

Every rate comes with its Monte-Carlo SE, ``sqrt(p (1 − p) / N)``; intervals that run many
datasets at once (one call per chunk of 100 datasets, as ``analyze`` runs many quantities at once)
share bootstrap draws only within a chunk, each chunk with its own seed. Fixed seeds throughout.

    python benchmarks/bench_honest.py [--quick] [--no-write] [--label before|after] [--out honest.json]

BENCHMARKS.md is written only with ``--label after`` (and not ``--no-write``). The t reference
uses ``scipy.stats.ttest_1samp`` when scipy is importable (it is not a dependency of ckptsel),
else the same test through ``ckptsel.stats.distributions.t_quantile``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

import numpy as np

import ckptsel
from ckptsel.records.load import TestData
from ckptsel.stats.bootstrap import percentile_interval
from ckptsel.stats.distributions import t_quantile
from ckptsel.stats.estimates import StatSettings, _configuration_estimates
from ckptsel.stats.exact import sign_flip_p
from ckptsel.stats.resample import clustered_means
from ckptsel.workflows.advise.comparison import CompareSettings, paired_difference
from ckptsel.workflows.advise.selection import test_gain

from _common import machine, update_section

try:  # the independent reference for the t test; not a ckptsel dependency
    from scipy import stats as _scipy_stats
except ImportError:  # pragma: no cover - depends on the environment
    _scipy_stats = None

LEVEL = 0.95
ALPHA = 1 - LEVEL
CHUNK = 100  # datasets per vectorized call (they share bootstrap draws; each chunk its own seed)

KS = (2, 3, 4, 5, 6, 8)
METHODS = ("cr2", "percentile", "wild")
CONFIG_SCENARIOS = ("null", "effect", "zeros")
COMPARE_NS = (3, 4, 5, 6, 8, 10, 15, 20, 30, 60, 100, 200)
COMPARE_SCENARIOS = {"null": (0.15, 0.15), "effect": (0.30, 0.05), "small": (0.20, 0.10)}  # only-A, only-B
QUESTION_NS = (3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 30, 40, 50, 60, 80, 100, 150, 200)
SELECT_NS = (8, 10, 20, 40)


# --------------------------------------------------------------------------- helpers
def rate(hits, n: int | None = None) -> dict:
    """``{"rate", "se", "n"}`` of a boolean array (or a count ``hits`` out of ``n``)."""
    if n is None:
        hits = np.asarray(hits, bool)
        n, hits = hits.size, int(hits.sum())
    p = hits / n if n else float("nan")
    return {"rate": p, "se": math.sqrt(p * (1 - p) / n) if n else float("nan"), "n": int(n)}


def fmt(r: dict) -> str:
    return f"{100 * r['rate']:.1f} ± {100 * r['se']:.1f}"


def _chunks(n: int):
    for c, start in enumerate(range(0, n, CHUNK)):
        yield c, slice(start, min(n, start + CHUNK))


def t_test_rejects(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided one-sample t test of the ``(K, N)`` columns against 0 at ALPHA: ``(rejects (N,),
    p (N,) or NaN where scipy is missing)``; a column without spread never rejects."""
    K = x.shape[0]
    if _scipy_stats is not None:
        with np.errstate(invalid="ignore", divide="ignore"):
            p = np.asarray(_scipy_stats.ttest_1samp(x, 0.0, axis=0).pvalue)
        return np.nan_to_num(p, nan=1.0) <= ALPHA, p
    with np.errstate(invalid="ignore", divide="ignore"):
        t = x.mean(axis=0) / (x.std(axis=0, ddof=1) / math.sqrt(K))
    q = float(t_quantile(1 - ALPHA / 2, np.array(float(K - 1))))
    return np.nan_to_num(np.abs(t)) >= q, np.full(x.shape[1], np.nan)


def t_bounds(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The one-sample t interval of the ``(K, N)`` columns (scipy's t quantile when available)."""
    K = x.shape[0]
    q = (
        float(_scipy_stats.t.ppf(1 - ALPHA / 2, K - 1))
        if _scipy_stats is not None
        else float(t_quantile(1 - ALPHA / 2, np.array(float(K - 1))))
    )
    m, s = x.mean(axis=0), x.std(axis=0, ddof=1) / math.sqrt(K)
    return m - q * s, m + q * s


def covers(lo, hi, truth: float) -> bool:
    return lo is not None and hi is not None and lo <= truth <= hi


# --------------------------------------------------------------------------- 1. configurations
def config_gains(rng: np.random.Generator, K: int, scenario: str, N: int) -> tuple[np.ndarray, float, int]:
    """``(K, N)`` gains, the truth scored for coverage, and how many configurations are exactly 0."""
    if scenario == "null":
        return rng.normal(0.0, 1.0, (K, N)), 0.0, 0
    g = rng.normal(2.0, 1.0, (K, N))
    if scenario == "effect":
        return g, 2.0, 0
    z = int(round(0.4 * K))  # "zeros": which configurations are 0 is random per dataset
    ranks = np.argsort(rng.random((K, N)), axis=0)
    g[ranks < z] = 0.0
    return g, 2.0 * (K - z) / K, z  # the mean of the configurations' true gains


def bench_configurations(datasets: int, draws: int) -> dict:
    out = {}
    for K in KS:
        for scenario in CONFIG_SCENARIOS:
            rng = np.random.default_rng([44, 1, K, CONFIG_SCENARIOS.index(scenario)])
            sums, truth, zeros = config_gains(rng, K, scenario, datasets)
            sizes = np.ones_like(sums)
            cell = {"K": K, "scenario": scenario, "truth": truth, "zero_configurations": zeros}
            rejects, _ = t_test_rejects(sums)
            t_lo, t_hi = t_bounds(sums)
            cell["t_test"] = {"resolved": rate(rejects), "coverage": rate((t_lo <= truth) & (truth <= t_hi))}
            for method in METHODS:
                resolved, alone, cover, no_int = (np.zeros(datasets, bool) for _ in range(4))
                cr2_diff = 0.0
                for c, sl in _chunks(datasets):
                    s = sums[:, sl]
                    names = [("G", "nested", f"d{q}", "full") for q in range(s.shape[1])]
                    settings = StatSettings(interval=method, draws=draws, seed=1000 * K + c)
                    e = _configuration_estimates(names, s.mean(axis=0), s, sizes[:, sl], settings, 0)
                    with np.errstate(invalid="ignore"):
                        alone[sl] = (np.asarray(e.lo) > 0) | (np.asarray(e.hi) < 0)
                    if method == "cr2":  # CR2 with one trajectory per configuration = the t interval
                        lo_t, hi_t = t_bounds(s)
                        cr2_diff = max(
                            cr2_diff, float(np.nanmax(np.abs(np.asarray(e.lo) - lo_t))), float(np.nanmax(np.abs(np.asarray(e.hi) - hi_t)))
                        )
                    for q, nm in enumerate(names):
                        est = e.get(nm)
                        i = sl.start + q
                        resolved[i] = est is not None and est.estimable and not est.unresolved
                        no_int[i] = est is None or not est.estimable
                        cover[i] = est is not None and covers(est.lo, est.hi, truth)
                cell[method] = {
                    "resolved": rate(resolved),
                    "interval_alone": rate(alone),
                    "coverage": rate(cover),
                    "no_interval": rate(no_int),
                }
                if method == "cr2":
                    cell[method]["max_bound_diff_vs_t"] = cr2_diff
                    cell[method]["verdict_agrees_with_t"] = rate(alone == rejects)
            out[f"{K}/{scenario}"] = cell
    return out


# --------------------------------------------------------------------------- 2. compare
def compare_pair(rng: np.random.Generator, n: int, p_a: float, p_b: float) -> tuple[np.ndarray, np.ndarray]:
    """Only B right on [0, p_b), only A right on [p_b, p_a + p_b), both right elsewhere."""
    u = rng.random(n)
    return u >= p_b, (u < p_b) | (u >= p_a + p_b)


def bench_compare(datasets: int, draws: int) -> dict:
    out = {}
    for n in COMPARE_NS:
        groups = np.arange(n).astype(str)
        for scenario, (p_a, p_b) in COMPARE_SCENARIOS.items():
            rng = np.random.default_rng([44, 2, n, list(COMPARE_SCENARIOS).index(scenario)])
            truth = 100.0 * (p_a - p_b)
            res = alone = cov = none = outside = mcn = 0
            for s in range(datasets):
                a, b = compare_pair(rng, n, p_a, p_b)
                r = paired_difference(a, b, groups, CompareSettings(draws=draws, seed=s))
                d = r["difference"]
                lo, hi = d.get("lo"), d.get("hi")
                res += not d["unresolved"]
                if lo is None or hi is None:
                    none += 1
                else:
                    cov += lo <= truth <= hi
                    alone += lo > 0 or hi < 0
                    outside += lo < -100 or hi > 100
                mcn += r["mcnemar_p"] is not None and r["mcnemar_p"] <= ALPHA + 1e-12
            out[f"{n}/{scenario}"] = {
                "n": n,
                "scenario": scenario,
                "truth": truth,
                "resolved": rate(res, datasets),
                "interval_alone": rate(alone, datasets),
                "coverage": rate(cov, datasets),
                "no_interval": rate(none, datasets),
                "outside": rate(outside, datasets),
                "mcnemar_rejects": rate(mcn, datasets),
            }
    return out


def bench_extreme(draws: int) -> dict:
    out = {}
    for n in range(3, 11):
        r = paired_difference(np.ones(n, bool), np.zeros(n, bool), np.arange(n).astype(str), CompareSettings(draws=draws, seed=0))
        d = r["difference"]
        out[str(n)] = {
            "resolved": not d["unresolved"],
            "lo": d.get("lo"),
            "hi": d.get("hi"),
            "mcnemar_p": r["mcnemar_p"],
            "reason": d.get("cannot_resolve") or d.get("not_estimable"),
        }
    return out


# --------------------------------------------------------------------------- 3. question bootstrap
def question_null(rng: np.random.Generator, trajectories: int, n: int, Q: int) -> np.ndarray:
    """``(n, Q)`` per-item utilities (pp): the mean over ``trajectories`` of item differences
    +1 / −1 with probability 0.15 each, 0 else (a symmetric null)."""
    u = rng.random((trajectories, n, Q))
    return 100.0 * ((u < 0.15).astype(np.float64) - (u >= 0.85)).mean(axis=0)


def question_effect(rng: np.random.Generator, trajectories: int, n: int, Q: int) -> np.ndarray:
    """``(n, Q)`` per-item utilities (pp) under an effect: item differences +1 w.p. 0.25, −1 w.p.
    0.10 (truth +15 pp)."""
    u = rng.random((trajectories, n, Q))
    return 100.0 * ((u < 0.25).astype(np.float64) - (u >= 0.90)).mean(axis=0)


RULE_DATASETS = 2000  # datasets per n for the verdict with the exact test (its size is exact anyway)
RULE_FLIPS = 2000  # Monte-Carlo sign vectors beyond 16 items (the test is exact at any number)


def bench_question_rule(draws: int) -> dict:
    """The question family's verdict as ckptsel now reads it: the percentile interval excludes 0
    **and** the sign-flip test of the items' utilities rejects (``stats.sign_flip_p``), 3
    trajectories, null and +15 pp effect; beside the interval alone."""
    out = {}
    for scenario, make in (("null", question_null), ("effect", question_effect)):
        for n in QUESTION_NS:
            rng = np.random.default_rng([44, 5, n, scenario == "effect"])
            groups = np.arange(n).astype(str)
            alone, rule = np.zeros(RULE_DATASETS, bool), np.zeros(RULE_DATASETS, bool)
            for c, sl in _chunks(RULE_DATASETS):
                d = make(rng, 3, n, sl.stop - sl.start)
                lo, hi = percentile_interval(clustered_means(d, groups, draws, 9000 + c, 0), LEVEL)
                alone[sl] = (lo > 0) | (hi < 0)
                p = sign_flip_p(d, lambda c=c, n=n: np.random.default_rng([44, 6, n, c]), draws=RULE_FLIPS)
                rule[sl] = alone[sl] & (p <= 1 - LEVEL + 1e-12)
            out[f"{n}/{scenario}"] = {"alone": rate(alone), "resolved": rate(rule)}
    return out


def bench_question(datasets: int, draws: int) -> dict:
    out = {}
    for trajectories in (3, 1):
        cells = {}
        for n in QUESTION_NS:
            rng = np.random.default_rng([44, 3, trajectories, n])
            groups = np.arange(n).astype(str)
            excl = np.zeros(datasets, bool)
            degenerate = np.zeros(datasets, bool)
            for c, sl in _chunks(datasets):
                d = question_null(rng, trajectories, n, sl.stop - sl.start)
                reps = clustered_means(d, groups, draws, 7000 + c, 0)
                lo, hi = percentile_interval(reps, LEVEL)
                excl[sl] = (lo > 0) | (hi < 0)
                degenerate[sl] = ~(lo < hi)
            cells[str(n)] = {"size": rate(excl), "zero_width": rate(degenerate)}
        out[f"{trajectories}"] = {"cells": cells, "valid_from": {f"{tol:g}": valid_from(cells, tol) for tol in TOLERANCES}}
    return out


TOLERANCES = (0.05, 0.055, 0.06, 0.075)  # sizes a "valid" interval may reach (up to 2 MC SE more)


def valid_from(cells: dict, tol: float) -> int | None:
    """The smallest n of the grid from which every larger n has size ≤ ``tol`` + 2 SE (None: not
    even the largest). With ``tol`` = 5% this depends on the Monte-Carlo error itself when the
    interval's true size stays a little above 5% at every n (the percentile interval of a mean is
    a z interval with the variance divided by n, not n − 1: about 5 + O(1/n) %)."""
    out = None
    for n in reversed(QUESTION_NS):
        r = cells[str(n)]["size"]
        if r["rate"] > tol + 2 * r["se"]:
            break
        out = n
    return out


# --------------------------------------------------------------------------- 4. select vs compare
def select_dataset(rng: np.random.Generator, n: int, T: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """Validation and test correctness ``(T, n)`` each: item ease N(0, 1), checkpoint ability
    N(0, 0.5²) (one draw per dataset, shared by both splits), logistic."""
    ability = rng.normal(0.0, 0.5, T)

    def split() -> np.ndarray:
        ease = rng.normal(0.0, 1.0, n)
        p = 1.0 / (1.0 + np.exp(-(ability[:, None] + ease[None, :])))
        return rng.random((T, n)) < p

    return split(), split()


def bench_select(datasets: int, draws: int) -> dict:
    out = {}
    T = 5
    for n in SELECT_NS:
        rng = np.random.default_rng([44, 4, n])
        groups = np.arange(n).astype(str)
        ids = np.array([f"i{k:03d}" for k in range(n)])
        differ, differ_moved, moved = 0, 0, 0
        tg_res = cmp_res = tg_only = cmp_only = 0
        for s in range(datasets):
            val, test_correct = select_dataset(rng, n, T)
            w = int(np.argmax(val.mean(axis=1)))
            choice = np.zeros(T)
            choice[w] = 1.0
            test = TestData(
                trajectory="t",
                configuration="c",
                task="x",
                steps=np.arange(T),
                item_ids=ids,
                subtasks=np.zeros(n, dtype=np.int64),
                correct=test_correct,
                answers=np.zeros((T, n), dtype=np.int64),
                groups=None,
            )
            g = test_gain(choice, test, draws, s, LEVEL).estimate
            r = paired_difference(test_correct[w], test_correct[-1], groups, CompareSettings(draws=draws, seed=s))
            a_res = g.estimable and not g.unresolved
            b_res = not r["difference"]["unresolved"]
            tg_res += a_res
            cmp_res += b_res
            tg_only += a_res and not b_res
            cmp_only += b_res and not a_res
            differ += a_res != b_res
            if w != T - 1:
                moved += 1
                differ_moved += a_res != b_res
        out[str(n)] = {
            "n": n,
            "differ": rate(differ, datasets),
            "test_gain_resolved": rate(tg_res, datasets),
            "compare_resolved": rate(cmp_res, datasets),
            "test_gain_only": rate(tg_only, datasets),
            "compare_only": rate(cmp_only, datasets),
            "chosen_not_final": rate(moved, datasets),
            "differ_when_chosen_not_final": rate(differ_moved, moved),
        }
    return out


# --------------------------------------------------------------------------- report
def _from(n: int | None) -> str:
    return f"n = {n}" if n is not None else f"not even at n = {QUESTION_NS[-1]}"


def markdown(res: dict, args, size: dict, times: dict) -> str:
    run = ", ".join(f"{k} {v:.0f} s" for k, v in times.items())
    cfg, cmp_, q, sel = res["configurations"], res["compare"], res["question"], res["select"]
    lines = [
        "## Honest in both directions: size, power and coverage of every verdict on small designs (`benchmarks/bench_honest.py`, issue 44)",
        "",
        f"Label: **{args.label}**. Run: `python benchmarks/bench_honest.py{' --quick' if args.quick else ''}`; "
        f"{machine()}; {run}. Cells: rate ± Monte-Carlo SE (%). Level 95%. *Resolved* = the verdict ckptsel "
        "prints (interval excludes 0 and the small-design rule lets it); *alone* = the interval excludes 0.",
        "",
        f"**1. analyze, K configurations of one trajectory each** ({size['configs'][0]} datasets per cell, "
        f"{size['configs'][1]} draws). Null N(0, 1); effect N(2, 1) (truth 2); zeros: round(0.4 K) gains exactly 0, "
        "the others N(2, 1) (truth 2 (K − z) / K). t = one-sample t test of the K gains (the reference). "
        f"CR2 vs the t interval: largest bound difference {max(c['cr2']['max_bound_diff_vs_t'] for c in cfg.values()):.2g} "
        f"(t quantile from {'scipy' if _scipy_stats is not None else 'ckptsel'}).",
        "",
        "| K | scenario | t resolved | cr2 resolved | cr2 alone | cr2 coverage | percentile resolved | percentile alone "
        "| percentile coverage | wild resolved | wild alone | wild coverage |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cfg.values():
        lines.append(
            f"| {c['K']} | {c['scenario']} | {fmt(c['t_test']['resolved'])} | "
            + " | ".join(f"{fmt(c[m]['resolved'])} | {fmt(c[m]['interval_alone'])} | {fmt(c[m]['coverage'])}" for m in METHODS)
            + " |"
        )
    lines += [
        "",
        f"**2. compare, n independent items** ({size['compare'][0]} datasets per cell, {size['compare'][1]} draws). "
        "Null only-A = only-B = 0.15; effect 0.30 / 0.05 (+25 pp); small 0.20 / 0.10 (+10 pp). Coverage counts "
        "no interval as a miss. McNemar = the exact test's own rate of p ≤ 0.05.",
        "",
        "| n | null resolved | null McNemar | null coverage | +25 resolved | +25 McNemar | +25 coverage "
        "| +25 no interval | +10 resolved | +10 McNemar | +10 coverage | bounds outside ±100 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n in COMPARE_NS:
        a, b, c = (cmp_[f"{n}/{s}"] for s in COMPARE_SCENARIOS)
        out_max = max(x["outside"]["rate"] for x in (a, b, c))
        lines.append(
            f"| {n} | {fmt(a['resolved'])} | {fmt(a['mcnemar_rejects'])} | {fmt(a['coverage'])} | "
            f"{fmt(b['resolved'])} | {fmt(b['mcnemar_rejects'])} | {fmt(b['coverage'])} | "
            f"{fmt(b['no_interval'])} | {fmt(c['resolved'])} | {fmt(c['mcnemar_rejects'])} | "
            f"{fmt(c['coverage'])} | {100 * out_max:.1f} |"
        )
    lines += [
        "",
        "A right on every item, B wrong on every item:",
        "",
        "| n | resolved | interval | McNemar p | reason |",
        "|---|---|---|---|---|",
    ]
    for n, e in res["extreme"].items():
        iv_ = "none" if e["lo"] is None else f"[{e['lo']:.1f}, {e['hi']:.1f}]"
        lines.append(f"| {n} | {'yes' if e['resolved'] else 'no'} | {iv_} | {e['mcnemar_p']:.3g} | {e['reason'] or ''} |")
    lines += [
        "",
        f"**3. the test-question percentile bootstrap alone** ({size['question'][0]} datasets per n, "
        f"{size['question'][1]} draws): its size (interval excludes 0) under a symmetric null. 3 trajectories: "
        "per-item utility = mean of 3 item differences ±1 w.p. 0.15 each; 1 trajectory: one such difference. "
        "Size ≤ tolerance + 2 SE at every n from: "
        + "; ".join(
            f"{100 * float(t):g}%: {_from(q['3']['valid_from'][t])} (3 trajectories), {_from(q['1']['valid_from'][t])} (1 trajectory)"
            for t in q["3"]["valid_from"]
        )
        + ".",
        "",
        "| n | size, 3 trajectories | size, 1 trajectory |",
        "|---|---|---|",
    ]
    for n in QUESTION_NS:
        lines.append(f"| {n} | {fmt(q['3']['cells'][str(n)]['size'])} | {fmt(q['1']['cells'][str(n)]['size'])} |")
    qr = res.get("question_rule")
    lines += (
        []
        if qr is None
        else [
            "",
            f"**3b. the test-question verdict as ckptsel reads it now** ({RULE_DATASETS} datasets per n, "
            f"{size['question'][1]} draws, 3 trajectories): the percentile interval excludes 0 *and* the exact "
            f"sign-flip test of the items' utilities rejects (every sign vector up to 16 items, {RULE_FLIPS} "
            "Monte-Carlo ones beyond). Null as in 3; effect: item differences +1 w.p. 0.25, −1 w.p. 0.10 "
            "(+15 pp).",
            "",
            "| n | null: alone | null: resolved | +15 pp: alone | +15 pp: resolved |",
            "|---|---|---|---|---|",
        ]
    )
    for n in QUESTION_NS if qr is not None else ():
        a, b = qr[f"{n}/null"], qr[f"{n}/effect"]
        lines.append(f"| {n} | {fmt(a['alone'])} | {fmt(a['resolved'])} | {fmt(b['alone'])} | {fmt(b['resolved'])} |")
    lines += [
        "",
        f"**4. select's test gain vs compare** on the same chosen and final checkpoints (T = 5, chosen by "
        f"validation accuracy on n other items; {size['select'][0]} datasets per n, {size['select'][1]} draws): "
        "share of datasets whose verdicts differ.",
        "",
        "| n | verdicts differ | differ, chosen ≠ final | test gain resolved | compare resolved | only test gain "
        "| only compare | chosen ≠ final |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for n in SELECT_NS:
        s = sel[str(n)]
        lines.append(
            f"| {n} | {fmt(s['differ'])} | {fmt(s['differ_when_chosen_not_final'])} | "
            f"{fmt(s['test_gain_resolved'])} | {fmt(s['compare_resolved'])} | {fmt(s['test_gain_only'])} | "
            f"{fmt(s['compare_only'])} | {fmt(s['chosen_not_final'])} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument(
        "--label", choices=("before", "after"), default=None, help="after: also write the section into BENCHMARKS.md (unless --no-write)"
    )
    ap.add_argument("--out", type=Path, default=None, help="JSON of every number")
    ap.add_argument("--before", type=Path, default=None, help="the --out JSON of a --label before run, rendered below the section")
    args = ap.parse_args()
    # (datasets per cell, bootstrap draws); the question bootstrap is cheap and its threshold needs a small SE
    size = {"configs": (2000, 2000), "compare": (2000, 1000), "question": (10000, 1000), "select": (2000, 1000)}
    if not args.quick:
        size = {"configs": (10000, 2000), "compare": (5000, 1000), "question": (40000, 1000), "select": (5000, 1000)}
    res, times = {}, {}
    for name, fn, arg in (
        ("configurations", bench_configurations, size["configs"]),
        ("compare", bench_compare, size["compare"]),
        ("extreme", bench_extreme, (size["compare"][1],)),
        ("question", bench_question, size["question"]),
        ("question_rule", bench_question_rule, (size["question"][1],)),
        ("select", bench_select, size["select"]),
    ):
        t0 = time.perf_counter()
        res[name] = fn(*arg)
        times[name] = time.perf_counter() - t0
        print(f"{name}: {times[name]:.0f} s", flush=True)
    text = markdown(res, args, size, times)
    print(text)
    if args.out is not None:
        meta = {
            "label": args.label,
            "quick": args.quick,
            "sizes": size,
            "seconds": times,
            "machine": machine(),
            "ckptsel": os.path.dirname(ckptsel.__file__),
            "t_reference": "scipy" if _scipy_stats else "ckptsel",
        }
        args.out.write_text(json.dumps({"meta": meta, **res}, indent=1, default=float))
    if args.before is not None:
        before = json.loads(args.before.read_text())
        meta = before.pop("meta")
        b_args = argparse.Namespace(label=f"before (the code of {meta.get('commit', 'main before issue 44')})", quick=meta["quick"])
        text += "\n\n" + markdown(before, b_args, meta["sizes"], meta["seconds"]).replace("## ", "### ", 1)
    if args.label == "after" and not args.no_write:
        update_section("bench_honest", text)


if __name__ == "__main__":
    main()
