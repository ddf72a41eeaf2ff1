"""Calibration of ``ckptsel plan`` on simulated trajectories with known truth.

A small truth-known generator: checkpoint ``t`` has true accuracy ``p_t`` (the last one is the
final checkpoint). Items come in groups of two variants; item ``i`` is answered correctly at
``t`` iff ``a·u_i + √(1−a²)·e_ti < Φ⁻¹(p_t)``, with ``u`` the item difficulty (variants of a
group share part of it) and ``e`` independent noise, so a fresh item is right with probability
exactly ``p_t`` and checkpoints agree on most items (``a`` sets the agreement).

For each scenario and pilot size, ``--pilots`` pilots are drawn and ``plan_from_pilot``'s
engine (accuracy rule) predicts, per budget, the probability that the rule's choice beats the
final checkpoint: ``calibrated`` (plan's default: the promise at the least favourable truth of
the pilot's simultaneous 95% box, :func:`ckptsel.workflows.advise.planning.calibrated_curves`)
and, with ``--methods calibrated,split,pilot``, the older resampling estimates
(:func:`~ckptsel.workflows.advise.planning.pilot_curves`). The *actual* values come from
``--fresh`` fresh validation sets of each budget drawn from the generator and scored by the true
accuracies. The planned budget is the smallest budget whose predicted probability reaches
``--target``. The checks of issue 23:

* (a) when the final checkpoint is the best, at most 1 of 20 pilots (5%) gets a plan;
* (b) where plans are made, ≥ 80% of planned budgets deliver at least target − 5 pp;
* (c) a pilot without a plan gets "no budget up to the largest reaches the target" and the
  largest promise.

    python benchmarks/bench_plan.py [--pilots 200] [--fresh 4000] [--methods calibrated] [--no-write]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ckptsel.choose import core
from ckptsel.stats import norm_ppf
from ckptsel.workflows.advise.planning import PilotMoments, calibrated_curves, pilot_curves

from _common import machine, update_section

BUDGETS = (32, 64, 128, 256, 512, 1024, 2048)
# true accuracies per checkpoint; the last is the final checkpoint
SCENARIOS = {
    "peak then decline (best +4 pp)": np.array([0.40, 0.46, 0.50, 0.53, 0.555, 0.545, 0.535, 0.515]),
    "late small gain (best +1.5 pp)": np.array([0.50, 0.56, 0.60, 0.62, 0.628, 0.635, 0.627, 0.62]),
    "final is best (gaps 0.5-3 pp)": np.array([0.45, 0.52, 0.56, 0.58, 0.585, 0.59, 0.595, 0.60]),
    "small peak (best +0.5 pp)": np.array([0.50, 0.56, 0.59, 0.605, 0.615, 0.62, 0.618, 0.615]),
}
LOADING = 0.85  # a: weight of the item difficulty (checkpoint agreement ~ 0.85-0.9)
GROUP_SHARE = 0.5  # share of the difficulty variance that the two variants of a group share
CHUNK = 500
METHODS = ("calibrated", "split", "pilot")  # plan's default, and the two older resamplings


def draw_items(rng: np.random.Generator, p: np.ndarray, reps: int, n: int) -> np.ndarray:
    """``(reps, T, n)`` correctness of ``n`` fresh items (``n/2`` groups of two variants)."""
    g = rng.standard_normal((reps, 1, n // 2)).repeat(2, axis=2)
    u = np.sqrt(GROUP_SHARE) * g + np.sqrt(1 - GROUP_SHARE) * rng.standard_normal((reps, 1, n))
    e = rng.standard_normal((reps, len(p), n))
    z = LOADING * u + np.sqrt(1 - LOADING**2) * e
    return z < norm_ppf(p)[None, :, None]


def actual_curves(p: np.ndarray, fresh: int, seed: int) -> tuple[np.ndarray, np.ndarray, float]:
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
            c = draw_items(rng, p, reps, n)
            probs = core.tie_probabilities(c.sum(axis=2).T.astype(float))  # (T, reps)
            b += (beat_t @ probs).sum()
            g += (gain_t @ probs).sum()
            if n == BUDGETS[-1] and start == 0:
                agree.append((c[:, :-1] == c[:, -1:]).mean())
        beat.append(b / fresh)
        gain.append(g / fresh)
    return np.array(beat), np.array(gain), float(np.mean(agree))


def predict(method: str, pilot: np.ndarray, groups: np.ndarray, draws: int, seed: int) -> np.ndarray:
    """``(B,)`` predicted P(choice beats final) of one pilot (T, n) by ``method``."""
    if method == "calibrated":
        m = PilotMoments.of(pilot, pilot, groups, True)
        return calibrated_curves(m, BUDGETS, draws, 0.95, seed)["p_beat"]
    return pilot_curves(pilot, pilot, groups, True, BUDGETS, draws, seed=seed, method=method)["p_beat"]


def binom_ge2(rate: float, n: int = 20) -> float:
    """P(at least 2 of ``n`` pilots plan) when each plans with probability ``rate``."""
    return 1 - (1 - rate) ** n - n * rate * (1 - rate) ** (n - 1)


def cell(name, p, method, size, pred, act_beat, target) -> tuple[str, bool]:
    """One summary row of the calibration table and whether its check passes."""
    pb = np.array(pred)  # (pilots, B)
    hit = pb >= target
    planned = hit.any(axis=1)
    ach = act_beat[np.argmax(hit, axis=1)][planned]
    final_best = bool((p[:-1] <= p[-1]).all())
    rate = planned.mean()
    in20 = int(planned[:20].sum())
    if final_best:
        ok = in20 <= 1 and rate <= 0.05
        check = f"(a) {'ok' if ok else 'FAIL'}: {in20}/20, rate {rate:.3f}, P(≥2 of 20) {binom_ge2(rate):.3f}"
    elif act_beat.max() < target - 0.05:  # no budget truly reaches the target: every plan is false
        ok = in20 <= 1 and rate <= 0.05
        check = (f"(b) {'ok' if ok else 'FAIL'} as (a): target unreachable at every budget, so every "
                 f"plan is false: {in20}/20, rate {rate:.3f}")  # fmt: skip
    else:
        share = (ach >= target - 0.05).mean() if len(ach) else float("nan")
        ok = not len(ach) or share >= 0.8
        check = f"(b) {'ok' if ok else 'FAIL'}"
    no_plan = pb[~planned].max(axis=1) if (~planned).any() else np.array([np.nan])
    budgets = np.array(BUDGETS)[np.argmax(hit, axis=1)][planned]
    row = (
        f"| {name} | {method} | {size} | {planned.sum()}/{len(pb)} | {in20}/20 | "
        + (f"{ach.mean():.3f} | {(ach >= target - 0.05).mean():.2f} | {np.median(budgets):.0f} | "
           if len(ach) else "– | – | – | ")
        + f"{np.mean(no_plan):.3f} | {check} |"
    )  # fmt: skip
    return row, ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pilots", type=int, default=200)
    ap.add_argument("--pilot-sizes", default="256,512,1024")
    ap.add_argument("--fresh", type=int, default=4000)
    ap.add_argument("--draws", type=int, default=2000)
    ap.add_argument("--target", type=float, default=0.8)
    ap.add_argument("--methods", default="calibrated")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    sizes = [int(s) for s in args.pilot_sizes.split(",")]
    methods = args.methods.split(",")
    start = time.perf_counter()
    summary, lines, all_ok = [], [], True
    for k, (name, p) in enumerate(SCENARIOS.items()):
        act_beat, _, agree = actual_curves(p, args.fresh, seed=1000 + k)
        oracle = next((b for b, a in zip(BUDGETS, act_beat, strict=True) if a >= args.target), None)
        lines.append(f"| {name} | {agree:.3f} | " + " | ".join(f"{a:.3f}" for a in act_beat)
                     + f" | {oracle or '–'} |")  # fmt: skip
        for size in sizes:
            rng = np.random.default_rng([2000 + k, size])  # the first 20 pilots: the old bench's
            groups = np.repeat(np.arange(size // 2), 2).astype(str)
            pilots = [draw_items(rng, p, 1, size)[0] for _ in range(args.pilots)]
            for m in methods:
                pred = [predict(m, pil, groups, args.draws, j) for j, pil in enumerate(pilots)]
                row, ok = cell(name, p, m, size, pred, act_beat, args.target)
                all_ok &= ok or m != "calibrated"
                summary.append(row)
                print(row, flush=True)
    elapsed = time.perf_counter() - start
    body = [
        "## plan calibration (`benchmarks/bench_plan.py`)",
        "",
        f"Truth-known generator (8 checkpoints, items in groups of two variants, item-difficulty "
        f"loading {LOADING}); {args.pilots} pilots per (scenario, pilot size) (the first 20 are "
        f"the ones of the table before issue 23), {args.draws} simulated fresh sets per budget in "
        f"the planner, actual values from {args.fresh} fresh validation sets per budget scored by "
        f"the true accuracies. Planned budget = smallest of {list(BUDGETS)} whose predicted "
        f"P(choice beats final) ≥ {args.target}; `calibrated` at 95% confidence. {machine()}; "
        f"{elapsed:.0f} s.",
        "",
        "| scenario | method | pilot items | pilots with a plan | of the first 20 | actual "
        "P(beat) at the planned budget (mean) | (b) share of plans delivering ≥ target − 5 pp | "
        "median planned budget | (c) mean largest promise when no plan | check |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *summary,
        "",
        f"Checks of issue 23 for `calibrated`: {'all pass' if all_ok else 'SOME FAIL'}. (a) final "
        "checkpoint best: at most 1 of 20 pilots plans; (b) elsewhere ≥ 80% of planned budgets "
        "deliver at least target − 5 pp; (c) a pilot without a plan is told the largest P(beat) "
        "that can be promised (column (c)). Where no budget up to the largest truly reaches "
        "target − 5 pp (`small peak`), every plan is a false plan and (b) is checked as (a). "
        "The price of (a): a real gain is promised only once the "
        "pilot resolves it, so in `peak then decline` most pilots of 256 items get no plan "
        "although about 64 items would do (oracle budget below).",
        "",
        "Actual P(choice beats final) by budget (fresh sets scored by the truth):",
        "",
        "| scenario | mean agreement with final | " + " | ".join(str(b) for b in BUDGETS)
        + " | oracle budget |",
        "|---|---|" + "---|" * len(BUDGETS) + "---|",
        *lines,
    ]
    text = "\n".join(body)
    print(text)
    if not args.no_write:
        update_section("bench_plan", text)


if __name__ == "__main__":
    main()
