"""Calibration of ``ckptsel plan`` on simulated trajectories with known truth.

A small truth-known generator: checkpoint ``t`` has true accuracy ``p_t`` (the last one is the
final checkpoint). Items come in groups of two variants; item ``i`` is answered correctly at
``t`` iff ``a·u_i + √(1−a²)·e_ti < Φ⁻¹(p_t)``, with ``u`` the item difficulty (variants of a
group share part of it) and ``e`` independent noise, so a fresh item is right with probability
exactly ``p_t`` and checkpoints agree on most items (``a`` sets the agreement).

For each scenario and pilot size, ``--pilots`` pilots are drawn and ``plan_from_pilot``'s
engine (:func:`ckptsel.workflows.advise.planning.pilot_curves`, accuracy rule) predicts, per budget, the probability
that the rule's choice beats the final checkpoint and its expected gain, by both methods:
``split`` (plan's default: choose on resamples of one half of the pilot, score on the other,
both ways) and ``pilot`` (choose and score on the whole pilot). The *actual* values
come from ``--fresh`` fresh validation sets of each budget drawn from the generator and scored
by the true accuracies. The planned budget is the smallest budget whose predicted probability
reaches ``--target``; the check is whether the actual probability at that budget is within
±5 pp of the target.

    python benchmarks/bench_plan.py [--pilots 20] [--fresh 4000] [--no-write]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ckptsel.choose import core
from ckptsel.stats import norm_ppf
from ckptsel.workflows.advise.planning import pilot_curves

from _common import machine, update_section

BUDGETS = (32, 64, 128, 256, 512, 1024, 2048)
# true accuracies per checkpoint; the last is the final checkpoint
SCENARIOS = {
    "peak then decline (best +4 pp)": np.array([0.40, 0.46, 0.50, 0.53, 0.555, 0.545, 0.535, 0.515]),
    "late small gain (best +1.5 pp)": np.array([0.50, 0.56, 0.60, 0.62, 0.628, 0.635, 0.627, 0.62]),
    "final is best (gaps 0.5-3 pp)": np.array([0.45, 0.52, 0.56, 0.58, 0.585, 0.59, 0.595, 0.60]),
}
LOADING = 0.85  # a: weight of the item difficulty (checkpoint agreement ~ 0.85-0.9)
GROUP_SHARE = 0.5  # share of the difficulty variance that the two variants of a group share
CHUNK = 500
METHODS = ("split", "pilot")  # plan's cross-fitted default, and the whole-pilot resampling


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pilots", type=int, default=20)
    ap.add_argument("--pilot-sizes", default="256,1024")
    ap.add_argument("--fresh", type=int, default=4000)
    ap.add_argument("--draws", type=int, default=2000)
    ap.add_argument("--target", type=float, default=0.8)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    sizes = [int(s) for s in args.pilot_sizes.split(",")]
    start = time.perf_counter()
    lines = []
    summary = []
    for k, (name, p) in enumerate(SCENARIOS.items()):
        act_beat, act_gain, agree = actual_curves(p, args.fresh, seed=1000 + k)
        for size in sizes:
            pred = {m: ([], [], []) for m in METHODS}  # predicted P(beat), gain, achieved
            rng = np.random.default_rng([2000 + k, size])
            for j in range(args.pilots):
                pilot = draw_items(rng, p, 1, size)[0]  # (T, n)
                groups = np.repeat(np.arange(size // 2), 2).astype(str)
                for m in METHODS:
                    c = pilot_curves(pilot, pilot, groups, True, BUDGETS, args.draws, seed=j,
                                     method=m)  # fmt: skip
                    pred[m][0].append(c["p_beat"])
                    pred[m][1].append(c["gain"])
                    hit = np.flatnonzero(c["p_beat"] >= args.target)
                    pred[m][2].append(act_beat[hit[0]] if len(hit) else np.nan)
            for m in METHODS:
                pb, pg, ach = (np.array(x) for x in pred[m])
                planned = ach[np.isfinite(ach)]
                for i, n in enumerate(BUDGETS):
                    lines.append(
                        f"| {name} | {m} | {size} | {n} | {n / size:.2f} | {act_beat[i]:.3f} | "
                        f"{pb[:, i].mean():.3f} ({np.percentile(pb[:, i], 10):.2f}–"
                        f"{np.percentile(pb[:, i], 90):.2f}) | "
                        f"{pb[:, i].mean() - act_beat[i]:+.3f} | "
                        f"{act_gain[i]:+.2f} | {pg[:, i].mean():+.2f} |"
                    )
                within = np.abs(planned - args.target) <= 0.05
                inside = np.array(BUDGETS) <= size
                bias = (pb.mean(axis=0) - act_beat)[inside]
                worst = bias[np.argmax(np.abs(bias))]
                summary.append(
                    f"| {name} | {m} | {agree:.3f} | {size} | {worst:+.3f} | "
                    f"{len(planned)}/{args.pilots} | "
                    + (
                        f"{planned.mean():.3f} | {within.mean():.2f} | "
                        f"{(planned >= args.target - 0.05).mean():.2f} |"
                        if len(planned)
                        else "– | – | – |"
                    )
                )
                print(summary[-1], flush=True)
    elapsed = time.perf_counter() - start
    body = [
        "## plan calibration (`benchmarks/bench_plan.py`)",
        "",
        f"Truth-known generator (8 checkpoints, items in groups of two variants, item-difficulty "
        f"loading {LOADING}); {args.pilots} pilots per (scenario, pilot size), {args.draws} "
        f"resamples per budget, actual values from {args.fresh} fresh validation sets per budget "
        f"scored by the true accuracies. Planned budget = smallest of {list(BUDGETS)} whose "
        f"predicted P(choice beats final) ≥ {args.target}. {machine()}; {elapsed:.0f} s.",
        "",
        "| scenario | method | mean agreement with final | pilot items | largest bias of "
        "predicted P(beat), budgets ≤ pilot | pilots whose plan reaches the target | actual "
        "P(beat) at the planned budget (mean over those pilots) | share of them within ±5 pp of "
        "target | share of them at least target − 5 pp |",
        "|---|---|---|---|---|---|---|---|---|",
        *summary,
        "",
        "How to read it: a negative bias is a conservative prediction (the plan asks for more "
        "items than needed), a positive one an optimistic prediction (the planned budget "
        "delivers less than the target). In `final is best` every plan that reaches the "
        "target is wrong (the true P(beat) is 0 at every budget): the column `pilots whose plan "
        "reaches the target` counts false plans there.",
        "",
        "Per budget (predicted = mean over pilots, 10th–90th percentile in brackets; "
        "`n / pilot` > 1 is extrapolation):",
        "",
        "| scenario | method | pilot | budget n | n / pilot | actual P(beat) | predicted P(beat) | "
        "bias | actual E gain pp | predicted E gain pp |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *lines,
    ]
    text = "\n".join(body)
    print(text)
    if not args.no_write:
        update_section("bench_plan", text)


if __name__ == "__main__":
    main()
