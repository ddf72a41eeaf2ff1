"""Calibration of ``ckptsel plan`` on simulated trajectories with known truth.

A small truth-known generator: checkpoint ``t`` has true accuracy ``p_t`` (the last one is the
final checkpoint). Items come in groups of two variants; item ``i`` is answered correctly at
``t`` iff ``a·u_i + √(1−a²)·e_ti < Φ⁻¹(p_t)``, with ``u`` the item difficulty (variants of a
group share part of it) and ``e`` independent noise, so a fresh item is right with probability
exactly ``p_t`` and checkpoints agree on most items (``a`` sets the agreement).

For each scenario and pilot size, ``--pilots`` pilots are drawn and ``plan_from_pilot``'s
engine (accuracy rule) predicts, per budget, the probability that the rule's choice beats the
final checkpoint: ``calibrated`` (plan's default: the promise at the least favourable truth of
the pilot's simultaneous 95% box, one-sided lower bounds since issue 44,
:func:`ckptsel.workflows.advise.planning.calibrated_curves`), ``two-sided`` (the same promise
with the two-sided lower bounds it had before issue 44) and, with ``--methods
calibrated,two-sided,split,pilot``, the older resampling estimates
(:func:`~ckptsel.workflows.advise.planning.pilot_curves`). The *actual* values come from
``--fresh`` fresh validation sets of each budget drawn from the generator and scored by the true
accuracies. The planned (safe) budget is the smallest budget whose predicted probability
reaches ``--target``; the *smallest* budget (issue 44) the smallest whose pilot-as-truth
estimate ``p_beat_point`` reaches it (plan's ``smallest_budget``, not guaranteed); the *oracle*
budget the smallest whose actual probability reaches it. A promise is *broken* when the actual
P(beat) at the planned budget is below the target. The checks of issue 23:

* (a) when the final checkpoint is the best, at most 1 of 20 pilots (5%) gets a plan;
* (b) where plans are made, ≥ 80% of planned budgets deliver at least target − 5 pp;
* (c) a pilot without a plan gets "no budget up to the largest reaches the target" and the
  largest promise;

and of issue 44: (d) in every cell at most 5% of pilots (+ 2 Monte Carlo standard errors) get a
broken promise.

    python benchmarks/bench_plan.py [--pilots 200] [--fresh 4000] [--methods calibrated,two-sided]
        [--quick] [--no-write]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ckptsel.choose import core
from ckptsel.stats.distributions import norm_ppf
from ckptsel.workflows.advise.planning import PilotMoments, calibrated_curves, pilot_curves

from _common import machine, update_section

BUDGETS = (32, 64, 128, 256, 512, 1024, 2048)
LOADING = 0.85  # a: weight of the item difficulty (checkpoint agreement ~ 0.75)
# true accuracies per checkpoint (the last is the final checkpoint) and the loading a
SCENARIOS = {
    "peak then decline (best +4 pp)": (np.array([0.40, 0.46, 0.50, 0.53, 0.555, 0.545, 0.535, 0.515]), LOADING),
    "late small gain (best +1.5 pp)": (np.array([0.50, 0.56, 0.60, 0.62, 0.628, 0.635, 0.627, 0.62]), LOADING),
    "final is best (gaps 0.5-3 pp)": (np.array([0.45, 0.52, 0.56, 0.58, 0.585, 0.59, 0.595, 0.60]), LOADING),
    "small peak (best +0.5 pp)": (np.array([0.50, 0.56, 0.59, 0.605, 0.615, 0.62, 0.618, 0.615]), LOADING),
    # issue 44: a +2 pp peak on checkpoints that agree more (64 fresh items do), a clear +8 pp
    # peak, and two hostile truths: every checkpoint equally good, one exact tie with the final
    "+2 pp peak, high agreement (issue 44)": (np.array([0.50, 0.54, 0.57, 0.59, 0.60, 0.595, 0.585, 0.58]), 0.95),
    "+8 pp peak (issue 44)": (np.array([0.40, 0.50, 0.56, 0.60, 0.58, 0.56, 0.54, 0.52]), LOADING),
    "all equal (hostile)": (np.full(8, 0.60), LOADING),
    "one exact tie, rest worse (hostile)": (np.array([0.40, 0.45, 0.50, 0.52, 0.54, 0.56, 0.60, 0.60]), 0.95),
}
GROUP_SHARE = 0.5  # share of the difficulty variance that the two variants of a group share
CHUNK = 500
MIN_PLANS_B = 10  # (b) is judged on at least this many plans
METHODS = ("calibrated", "two-sided", "split", "pilot")  # plan's default, before issue 44, older


def draw_items(rng: np.random.Generator, p: np.ndarray, reps: int, n: int, a: float = LOADING) -> np.ndarray:
    """``(reps, T, n)`` correctness of ``n`` fresh items (``n/2`` groups of two variants)."""
    g = rng.standard_normal((reps, 1, n // 2)).repeat(2, axis=2)
    u = np.sqrt(GROUP_SHARE) * g + np.sqrt(1 - GROUP_SHARE) * rng.standard_normal((reps, 1, n))
    e = rng.standard_normal((reps, len(p), n))
    z = a * u + np.sqrt(1 - a**2) * e
    return z < norm_ppf(p)[None, :, None]


def actual_curves(p: np.ndarray, fresh: int, seed: int, a: float = LOADING) -> tuple[np.ndarray, np.ndarray, float]:
    """True P(choice beats final) and E gain (pp) per budget; the mean agreement rate."""
    rng = np.random.default_rng(seed)
    beat_t = (p > p[-1]).astype(float)
    gain_t = 100 * (p - p[-1])
    beat, gain = [], []
    agree = []
    for n in BUDGETS:
        b = g = 0.0
        for start in range(0, fresh, CHUNK):
            reps = min(CHUNK, fresh - start)
            c = draw_items(rng, p, reps, n, a)
            probs = core.tie_probabilities(c.sum(axis=2).T.astype(float))  # (T, reps)
            b += (beat_t @ probs).sum()
            g += (gain_t @ probs).sum()
            if n == BUDGETS[-1] and start == 0:
                agree.append((c[:, :-1] == c[:, -1:]).mean())
        beat.append(b / fresh)
        gain.append(g / fresh)
    return np.array(beat), np.array(gain), float(np.mean(agree))


def predict(method: str, pilot: np.ndarray, groups: np.ndarray, draws: int, seed: int) -> tuple:
    """``(B,)`` predicted P(choice beats final) of one pilot (T, n) by ``method``, and the
    pilot-as-truth estimate (the resampling methods: their prediction itself)."""
    if method in ("calibrated", "two-sided"):
        m = PilotMoments.of(pilot, pilot, groups, True)
        c = calibrated_curves(m, BUDGETS, draws, 0.95, seed, lower_sides=2 if method == "two-sided" else 1)
        return c["p_beat"], c["p_beat_point"]
    c = pilot_curves(pilot, pilot, groups, True, BUDGETS, draws, seed=seed, method=method)["p_beat"]
    return c, c


def binom_ge2(rate: float, n: int = 20) -> float:
    """P(at least 2 of ``n`` pilots plan) when each plans with probability ``rate``."""
    return 1 - (1 - rate) ** n - n * rate * (1 - rate) ** (n - 1)


def _first(curves: np.ndarray, target: float) -> tuple[np.ndarray, np.ndarray]:
    """Per pilot (rows of ``curves`` (pilots, B)): whether a budget reaches ``target``, and the
    index of the first that does."""
    hit = curves >= target
    return hit.any(axis=1), np.argmax(hit, axis=1)


def broken_limit(pilots: int, rate: float = 0.05) -> float:
    """(d)'s bound: ``rate`` + 2 Monte Carlo standard errors over ``pilots`` pilots."""
    return rate + 2 * np.sqrt(rate * (1 - rate) / pilots)


def cell(name, p, method, size, pred, point, act_beat, target) -> tuple[str, bool, dict]:
    """One summary row of the calibration table, whether its checks pass, and its counts."""
    pb = np.array(pred)  # (pilots, B)
    planned, at = _first(pb, target)
    ach = act_beat[at][planned]
    broken = int((ach < target).sum())
    has_small, at_small = _first(np.maximum(np.array(point), pb), target)  # never above the safe
    small_broken = int((act_beat[at_small][has_small] < target).sum())
    final_best = bool((p[:-1] <= p[-1]).all())
    rate = planned.mean()
    in20 = int(planned[:20].sum())
    d_ok = broken / len(pb) <= broken_limit(len(pb))
    if final_best:
        ok = in20 <= 1 and rate <= 0.05
        check = f"(a) {'ok' if ok else 'FAIL'}: {in20}/20, rate {rate:.3f}, P(≥2 of 20) {binom_ge2(rate):.3f}"
    elif act_beat.max() < target - 0.05:  # no budget truly reaches the target: every plan is false
        ok = in20 <= 1 and rate <= 0.05
        check = (
            f"(b) {'ok' if ok else 'FAIL'} as (a): target unreachable at every budget, so every plan is false: {in20}/20, rate {rate:.3f}"
        )
    elif len(ach) < MIN_PLANS_B:  # (b) is a share of the plans: too few to judge; (d) decides
        ok = True
        short = int((ach < target - 0.05).sum())
        check = f"(b) not judged: {len(ach)} plan(s), {short} below target − 5 pp"
    else:
        ok = (ach >= target - 0.05).mean() >= 0.8
        check = f"(b) {'ok' if ok else 'FAIL'}"
    check += f"; (d) {'ok' if d_ok else 'FAIL'}"
    no_plan = pb[~planned].max(axis=1) if (~planned).any() else np.array([np.nan])
    budgets = np.array(BUDGETS)[at][planned]
    smalls = np.array(BUDGETS)[at_small][has_small]
    row = (
        f"| {name} | {method} | {size} | {planned.sum()}/{len(pb)} | {in20}/20 | "
        + (f"{ach.mean():.3f} | {(ach >= target - 0.05).mean():.2f} | {np.median(budgets):.0f} | " if len(ach) else "– | – | – | ")
        + f"{np.mean(no_plan):.3f} | {broken}/{len(pb)} | {has_small.sum()}/{len(pb)} | "
        + (f"{np.median(smalls):.0f} | " if len(smalls) else "– | ")
        + f"{small_broken}/{len(pb)} | {check} |"
    )
    counts = {
        "pilots": len(pb),
        "plans": int(planned.sum()),
        "broken": broken,
        "smallest": int(has_small.sum()),
        "smallest_broken": small_broken,
    }
    return row, ok and d_ok, counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pilots", type=int, default=200)
    ap.add_argument("--pilot-sizes", default="256,512,1024")
    ap.add_argument("--fresh", type=int, default=4000)
    ap.add_argument("--draws", type=int, default=2000)
    ap.add_argument("--target", type=float, default=0.8)
    ap.add_argument("--methods", default="calibrated,two-sided")
    ap.add_argument("--quick", action="store_true", help="75 pilots, 2000 fresh sets")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.pilots, args.fresh = 75, 2000
    sizes = [int(s) for s in args.pilot_sizes.split(",")]
    methods = args.methods.split(",")
    start = time.perf_counter()
    summary, lines, all_ok = [], [], True
    totals = {m: dict.fromkeys(("pilots", "plans", "broken", "smallest", "smallest_broken"), 0) for m in methods}
    for k, (name, (p, a)) in enumerate(SCENARIOS.items()):
        act_beat, _, agree = actual_curves(p, args.fresh, seed=1000 + k, a=a)
        oracle = next((b for b, x in zip(BUDGETS, act_beat, strict=True) if x >= args.target), None)
        lines.append(f"| {name} | {a} | {agree:.3f} | " + " | ".join(f"{x:.3f}" for x in act_beat) + f" | {oracle or '–'} |")
        for size in sizes:
            rng = np.random.default_rng([2000 + k, size])  # the first 20 pilots: the old bench's
            groups = np.repeat(np.arange(size // 2), 2).astype(str)
            pilots = [draw_items(rng, p, 1, size, a)[0] for _ in range(args.pilots)]
            for m in methods:
                pred, point = zip(*(predict(m, pil, groups, args.draws, j) for j, pil in enumerate(pilots)), strict=True)
                row, ok, counts = cell(name, p, m, size, pred, point, act_beat, args.target)
                all_ok &= ok or m not in ("calibrated", "two-sided")
                for key, v in counts.items():
                    totals[m][key] += v
                summary.append(row + f" {oracle or '–'} |")
                print(row, flush=True)
    elapsed = time.perf_counter() - start
    total_lines = [
        f"| {m} | {c['plans']}/{c['pilots']} | {c['broken']}/{c['pilots']} ({100 * c['broken'] / c['pilots']:.2f}%) | "
        f"{c['smallest']}/{c['pilots']} | {c['smallest_broken']}/{c['pilots']} "
        f"({100 * c['smallest_broken'] / c['pilots']:.1f}%) |"
        for m, c in totals.items()
    ]
    body = [
        "## plan calibration (`benchmarks/bench_plan.py`)",
        "",
        f"Truth-known generator (8 checkpoints, items in groups of two variants, item-difficulty "
        f"loading {LOADING} unless the scenario table says otherwise); {args.pilots} pilots per "
        f"(scenario, pilot size) (the first 20 are the ones of the table before issue 23), "
        f"{args.draws} simulated fresh sets per budget in the planner, actual values from "
        f"{args.fresh} fresh validation sets per budget scored by the true accuracies. Planned "
        f"(safe) budget = smallest of {list(BUDGETS)} whose predicted P(choice beats final) ≥ "
        f"{args.target}; `calibrated` (plan's default: one-sided simultaneous lower bounds since "
        f"issue 44) and `two-sided` (the same promise with the two-sided lower bounds of before "
        f"issue 44), both at 95% confidence. *Smallest* budget = plan's `smallest_budget`, the "
        f"smallest whose pilot-as-truth estimate reaches {args.target} (not guaranteed); a "
        f"promise or a smallest budget is *broken* when the actual P(beat) there is below "
        f"{args.target}. {machine()}; {elapsed:.0f} s" + (" (`--quick`)." if args.quick else "."),
        "",
        "| scenario | method | pilot items | pilots with a plan | of the first 20 | actual "
        "P(beat) at the planned budget (mean) | (b) share of plans delivering ≥ target − 5 pp | "
        "median planned budget | (c) mean largest promise when no plan | (d) promises broken | "
        "pilots with a smallest budget | median smallest budget | smallest budgets broken | "
        "check | oracle budget |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *summary,
        "",
        "All cells together:",
        "",
        "| method | pilots with a plan | promises broken | pilots with a smallest budget | smallest budgets broken |",
        "|---|---|---|---|---|",
        *total_lines,
        "",
        f"Checks for `calibrated` and `two-sided`: {'all pass' if all_ok else 'SOME FAIL'}. (a) "
        "final checkpoint best: at most 1 of 20 pilots plans; (b) elsewhere ≥ 80% of planned "
        f"budgets deliver at least target − 5 pp (judged where at least {MIN_PLANS_B} pilots plan: "
        "it is a share of the plans, and one plan of 4 below target − 5 pp fails it; (d) bounds "
        "the same failures as a share of all pilots, which is what the promise controls); (c) a "
        "pilot without a plan is told the largest P(beat) that can be promised (column (c)); (d) at most 5% of a cell's pilots get a "
        f"broken promise (+ 2 Monte Carlo SE: {broken_limit(args.pilots):.3f} at "
        f"{args.pilots} pilots). Where no budget up to the largest truly reaches target − 5 pp "
        "(`small peak`, the hostile truths), every plan is a false plan and (b) is checked as "
        "(a). The price of (a) and (d): a real gain is promised only once the pilot resolves "
        "it, so most pilots of a +4 pp or +2 pp peak get no plan although 64 items would do "
        "(oracle budget); `ckptsel plan` now says so, with the smallest budget whose estimate "
        "reaches the target beside the safe one (`smallest_budget`, `power_left`). That "
        "estimate is no promise: it is broken for about half of the pilots where the final "
        "checkpoint is the best or the gain is small (column *smallest budgets broken*).",
        "",
        "Actual P(choice beats final) by budget (fresh sets scored by the truth):",
        "",
        "| scenario | loading | mean agreement with final | " + " | ".join(str(b) for b in BUDGETS) + " | oracle budget |",
        "|---|---|---|" + "---|" * len(BUDGETS) + "---|",
        *lines,
    ]
    text = "\n".join(body)
    print(text)
    if not args.no_write:
        update_section("bench_plan", text)


if __name__ == "__main__":
    main()
