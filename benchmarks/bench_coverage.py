"""Coverage of the 95% intervals against truths known from the generating model (issue 14).

Each simulated study (``coverage_sim``: shared test questions, configuration heterogeneity,
seeds correlated within a configuration) goes through the same interval code as
``ckptsel analyze`` (``ckptsel.stats.bootstrap`` / ``intervals``, draws shared across
families as in ``stats.summarize``). Each family is scored against its own estimand:

* configuration — percentile bootstrap, CR2 t (Bell–McCaffrey df), wild cluster bootstrap-t
  (Webb) — against the mean over configurations conditional on the test questions;
* test-question — percentile — against the mean over questions conditional on the trajectories;
* joint — pigeonhole percentile (configurations × questions resampled together, the paper's),
  two-way t with the crossed-design correction — against the superpopulation mean.

Reports coverage ± its Monte Carlo standard error and the mean width, per scenario × K.

    python benchmarks/bench_coverage.py [--studies 1000] [--draws 2000] [--k 2,3,4,8,26] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from coverage_sim import Scenario, Simulator, arrays

from ckptsel.stats import bootstrap as bs
from ckptsel.stats import intervals as iv

from _common import machine, update_section

SCENARIOS = (Scenario("normal"), Scenario("skewed", skewed=True))
CELLS = (
    ("configuration", "percentile"),
    ("configuration", "cr2"),
    ("configuration", "wild"),
    ("question", "percentile"),
    ("joint", "percentile"),
    ("joint", "two-way t"),
)


def intervals_of_study(sums, sizes, util, draws: int, seed: int) -> dict:
    """``{(family, method): (lo, hi)}`` for one study, as stats.summarize computes them."""
    k = sums.shape[0]
    C = bs.configuration_counts(k, draws, seed)
    lo, hi = bs.percentile_interval(bs.cluster_replicates(C, sums, sizes))
    out = {("configuration", "percentile"): (lo[0], hi[0])}
    _, lo, hi = iv.cr2_interval(sums, sizes)
    out[("configuration", "cr2")] = (lo[0], hi[0])
    _, lo, hi = iv.wild_interval(iv.webb_weights(k, draws, seed), sums, sizes)
    out[("configuration", "wild")] = (lo[0], hi[0])
    uti, cidx = {"t": util}, {"t": np.arange(k)}
    pooled, _, joint = bs.question_replicates(uti, cidx, sizes, C, draws, seed, [0])
    lo, hi = bs.percentile_interval(pooled)
    out[("question", "percentile")] = (lo[0], hi[0])
    lo, hi = bs.percentile_interval(joint)
    out[("joint", "percentile")] = (lo[0], hi[0])
    mean = sums.sum(axis=0) / sizes.sum(axis=0)
    lo, hi = iv.twoway_interval(uti, cidx, sizes, [0], mean)
    out[("joint", "two-way t")] = (lo[0], hi[0])
    return out


def run_cell(scenario: Scenario, k: int, studies: int, draws: int) -> dict:
    sim = Simulator(scenario)
    rng = np.random.default_rng([20260825, k, int(scenario.skewed)])
    hits = {c: [] for c in CELLS}
    widths = {c: [] for c in CELLS}
    truths = []
    for i in range(studies):
        st = sim.study(k, rng)
        sums, sizes, util = arrays(st)
        truth = {"configuration": st.truth_configuration, "question": st.truth_question, "joint": sim.truth_joint}
        truths.append([st.truth_configuration, st.truth_question])
        for cell, (lo, hi) in intervals_of_study(sums, sizes, util, draws, seed=i).items():
            hits[cell].append(lo <= truth[cell[0]] <= hi)
            widths[cell].append(hi - lo)
    out = {"truth_joint": sim.truth_joint, "truth_mean": np.mean(truths, axis=0).tolist()}
    for c in CELLS:
        p = float(np.mean(hits[c]))
        out["|".join(c)] = {"coverage": p, "se": float(np.sqrt(p * (1 - p) / studies)), "width": float(np.mean(widths[c]))}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--studies", type=int, default=1000)
    ap.add_argument("--draws", type=int, default=2000)
    ap.add_argument("--k", default="2,3,4,8,26")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    ks = [int(x) for x in args.k.split(",")]
    start = time.perf_counter()
    results = {}
    for sc in SCENARIOS:
        for k in ks:
            results[(sc.name, k)] = run_cell(sc, k, args.studies, args.draws)
            print(sc.name, k, json.dumps(results[(sc.name, k)]), flush=True)
    elapsed = time.perf_counter() - start
    s0 = SCENARIOS[0]
    lines = [
        "## Interval coverage against known truths (`benchmarks/bench_coverage.py`)",
        "",
        f"{args.studies} simulated studies per cell (`benchmarks/coverage_sim.py`: one task, "
        f"{s0.items} test questions shared by every trajectory, 2–4 seeds per configuration, "
        f"configuration heterogeneity τ_a = {s0.tau_a} (normal, or a right-skewed centred "
        f"exponential), seed effect τ_u = {s0.tau_u}, question direction τ_b = {s0.tau_b}, "
        f"disagreement rate ½Beta(1, 4)); {args.draws} draws per study, shared across families "
        f"as in `analyze`; nominal level 95%. Each family is scored against its own estimand, "
        f"computed from the generating model: configuration = mean over configurations given "
        f"the test questions; test-question = mean over questions given the trajectories; "
        f"joint = superpopulation mean (normal: {results[(s0.name, ks[0])]['truth_joint']:+.3f} pp). "
        f"Cells: coverage ± Monte Carlo SE (mean width in pp). {elapsed:.0f} s on {machine()}.",
        "",
        "| scenario | K | " + " | ".join(f"{f} {m}" for f, m in CELLS) + " |",
        "|---|---:|" + "---|" * len(CELLS),
    ]
    for (name, k), r in results.items():
        cells = [r["|".join(c)] for c in CELLS]
        lines.append(f"| {name} | {k} | " + " | ".join(f"{x['coverage']:.1%} ± {x['se']:.1%} ({x['width']:.2f})" for x in cells) + " |")
    lines += [
        "",
        "Caution thresholds (smallest K from which the configuration interval covered >= 90% "
        "in every scenario; `FEW_CONFIGURATIONS` in `src/ckptsel/stats.py`):",
    ]
    for method in ("percentile", "cr2", "wild"):
        cov = {k: min(r[f"configuration|{method}"]["coverage"] for (n, kk), r in results.items() if kk == k) for k in ks}
        ok = [k for k in ks if all(cov[j] >= 0.90 for j in ks if j >= k)]
        thr = min(ok) if ok else None
        below = [k for k in ks if thr is not None and k < thr]
        note = f"{cov[max(below)]:.1%} at K = {max(below)}" if below else "no K measured below it"
        lines.append(f"* {method}: K = {thr} ({note})")
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        update_section("bench_coverage", text)


if __name__ == "__main__":
    main()
